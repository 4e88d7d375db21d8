module kiln-example

go 1.19

require kiln v0.0.0

replace kiln => ../../bindings/go
