module github.com/sluice-ai/sluice/perf/goclient

go 1.23

require github.com/sluice-ai/sluice/clients/go v0.0.0

replace github.com/sluice-ai/sluice/clients/go => ../../clients/go
