module github.com/lease-dev/lease/bindings/go

go 1.21
