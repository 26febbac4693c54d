module github.com/sluice-ai/sluice/go-control

go 1.26.8
