//! Native memory is freed on Drop: 8000 tensors of 256 KiB (2 GB in all),
//! never released explicitly, keep the process under 300 MB. A binary of its
//! own, so the peak RSS it reads is this loop's alone.
mod common;
use common::*;

use kiln::{DType, Device, Tensor};

#[test]
fn tensors_dropped_in_a_loop_stay_under_300_mb() {
    let ctx = context();
    let (before, _) = rss();
    let elements = 256 * 1024 / 4;
    let mut checksum = 0.0;
    for i in 0..8000 {
        let t = Tensor::full(&ctx, &[elements], DType::F32, Device::Cpu, i as f64).unwrap();
        // Read one element back, so every tensor is really made.
        checksum += t.rows(elements - 1, elements).unwrap().item().unwrap();
    }
    assert_eq!(checksum, (0..8000).map(f64::from).sum::<f64>());
    let (after, peak) = rss();
    eprintln!("8000 x 256 KiB tensors: RSS {:.1} MB before, {:.1} MB after, peak {:.1} MB",
              before as f64 / 1e6, after as f64 / 1e6, peak as f64 / 1e6);
    assert!(peak < 300_000_000, "peak RSS {peak} bytes");
}
