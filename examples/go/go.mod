module kiln-example

go 1.19

require github.com/kiln-ml/kiln/bindings/go v0.0.0

replace github.com/kiln-ml/kiln/bindings/go => ../../bindings/go
