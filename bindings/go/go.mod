module github.com/kiln-ml/kiln/bindings/go

go 1.19
