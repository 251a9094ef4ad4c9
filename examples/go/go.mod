module github.com/lease-dev/lease/examples/go

go 1.21

require github.com/lease-dev/lease/bindings/go v0.0.0

replace github.com/lease-dev/lease/bindings/go => ../../bindings/go
