module github.com/sluice-ai/sluice/clients/go

go 1.23
