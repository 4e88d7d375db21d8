//! The communicator API in one process: its error paths everywhere, and
//! where the plugin libkiln_dist.so sits beside libkiln, an MPI job of one
//! rank (a process not started by mpirun) attached to a trainer. A binary of
//! its own, because MPI is initialised once per process.
mod common;
use common::*;

use std::path::PathBuf;
use std::time::Duration;

use kiln::{Communicator, Dataset, Device, Model, Status, Trainer, TrainerOptions};

/// The directory libkiln.so was loaded from (the plugin is looked for
/// there), from /proc/self/maps.
fn libkiln_dir() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let path = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.rsplit('/').next().map_or(false, |f| f.starts_with("libkiln.so")))
        .expect("libkiln.so is mapped");
    PathBuf::from(path).parent().unwrap().to_owned()
}

#[test]
fn communicators() {
    let ctx = context();
    // Local (NCCL) communicators: argument errors come before any plugin.
    assert_eq!(Communicator::local(&ctx, &[]).unwrap_err().status, Status::InvalidArgument);
    assert_eq!(Communicator::local(&ctx, &[Device::Cpu]).unwrap_err().status, Status::InvalidArgument);
    // The list is checked before any device is looked for, with a GPU or without.
    let twice = Communicator::local(&ctx, &[Device::Cuda(0), Device::Cuda(0)]).unwrap_err();
    assert_eq!(twice.status, Status::InvalidArgument, "{twice}");
    if ctx.cuda_device_count().unwrap() == 0 {
        let err = Communicator::local(&ctx, &[Device::Cuda(0)]).unwrap_err();
        assert_eq!(err.status, Status::DeviceUnavailable, "{err}");
    }

    let plugin = libkiln_dir().join("libkiln_dist.so");
    if std::env::var_os("KILN_BACKEND_PATH").is_none() && !plugin.exists() {
        let err = Communicator::mpi(&ctx).unwrap_err();
        assert_eq!(err.status, Status::DeviceUnavailable, "{err}");
        eprintln!("skipping the MPI half: no {} ({err})", plugin.display());
        return;
    }
    let mut comm = match Communicator::mpi(&ctx) {
        Ok(comm) => comm,
        // The plugin is there but Open MPI's libmpi is not: the loader says so.
        Err(err) if err.status == Status::DeviceUnavailable && err.message.contains("libmpi") => {
            eprintln!("skipping the MPI half: {err}");
            return;
        }
        Err(err) => panic!("an MPI job of one rank: {err}"),
    };
    assert_eq!((comm.rank().unwrap(), comm.size().unwrap(), comm.local_rank().unwrap()), (0, 1, 0));
    assert_eq!(comm.to_string(), "rank 0 of 1 (local rank 0)");
    assert_eq!(comm.set_timeout(Duration::ZERO).unwrap_err().status, Status::InvalidArgument);
    comm.set_timeout(Duration::from_secs(30)).unwrap();

    // One rank trains exactly as no communicator at all.
    let (x, y) = tensors(&ctx, 256);
    let data = Dataset::from_tensors(&ctx, &x, &y).unwrap();
    let options = TrainerOptions::default().batch_size(32).shuffle_seed(5);
    let run = |comm: Option<Communicator>| {
        ctx.set_seed(9).unwrap();
        let mut model = Model::from_text(&ctx, "16-8-4", Device::Cpu).unwrap();
        let mut trainer = Trainer::new(&mut model, &options).unwrap();
        if let Some(comm) = comm {
            trainer.attach_communicator(comm).unwrap();
            assert_eq!(trainer.communicator().unwrap().size().unwrap(), 1);
            trainer.communicator_mut().unwrap().set_timeout(Duration::from_secs(60)).unwrap();
        }
        trainer.epochs(&data, 2).map(|s| s.unwrap().train_loss).collect::<Vec<f64>>()
    };
    let alone = run(None);
    let ranked = run(Some(comm));
    assert_eq!(ranked, alone);
}
