module github.com/sluice-ai/sluice/tests/attacks

go 1.26.8

require github.com/sluice-ai/sluice/clients/go v0.0.0

replace github.com/sluice-ai/sluice/clients/go => ../../clients/go
