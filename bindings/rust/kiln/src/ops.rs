//! `std::ops` on tensors. Kiln operations can fail (shapes that do not
//! broadcast, mixed dtypes or devices), so every operator returns
//! `Result<Tensor>`; a `Result<Tensor>` on the left of an operator carries an
//! earlier error on, which lets one `?` end a chain: `((&a + &b) * &c)?`.
//! Rust's orphan rule allows `Result<Tensor> op Tensor` but not
//! `Result<Tensor> op f64`: put a scalar on a tensor (`&a * 2.0`) or apply
//! `?` first.
use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::error::Result;
use crate::tensor::{BinaryOp, Tensor, UnaryOp};

macro_rules! binary_ops {
    ($($trait:ident $method:ident $op:ident;)*) => {$(
        impl $trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                self.binary(BinaryOp::$op, rhs)
            }
        }
        impl $trait<Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                self.binary(BinaryOp::$op, &rhs)
            }
        }
        impl $trait<&Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                self.binary(BinaryOp::$op, rhs)
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                self.binary(BinaryOp::$op, &rhs)
            }
        }
        impl $trait<&Tensor> for Result<Tensor> {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                self?.binary(BinaryOp::$op, rhs)
            }
        }
        impl $trait<Tensor> for Result<Tensor> {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                self?.binary(BinaryOp::$op, &rhs)
            }
        }
        impl $trait<Result<Tensor>> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Result<Tensor>) -> Result<Tensor> {
                self.binary(BinaryOp::$op, &rhs?)
            }
        }
        impl $trait<f64> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f64) -> Result<Tensor> {
                self.scalar(BinaryOp::$op, rhs)
            }
        }
        impl $trait<f64> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f64) -> Result<Tensor> {
                self.scalar(BinaryOp::$op, rhs)
            }
        }
    )*};
}

binary_ops! {
    Add add Add;
    Sub sub Sub;
    Mul mul Mul;
    Div div Div;
}

// A scalar on the left: the commutative operations only, where
// `s op t == t op s`.
impl Add<&Tensor> for f64 {
    type Output = Result<Tensor>;
    fn add(self, rhs: &Tensor) -> Result<Tensor> {
        rhs.scalar(BinaryOp::Add, self)
    }
}

impl Mul<&Tensor> for f64 {
    type Output = Result<Tensor>;
    fn mul(self, rhs: &Tensor) -> Result<Tensor> {
        rhs.scalar(BinaryOp::Mul, self)
    }
}

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        self.unary(UnaryOp::Neg, 0.0)
    }
}

impl Neg for Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        self.unary(UnaryOp::Neg, 0.0)
    }
}
