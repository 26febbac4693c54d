// Command apidoc writes docs/api.md from internal/api/openapi.json. Run it
// from go-control/ after editing the document; a test checks the page is
// current.
//
//	go run ./internal/api/apidoc [-o ../docs/api.md]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sluice-ai/sluice/go-control/internal/api"
)

func main() {
	out := flag.String("o", "../docs/api.md", "where to write the page")
	flag.Parse()
	md, err := api.Markdown(api.OpenAPI)
	if err == nil {
		err = os.WriteFile(*out, md, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "apidoc: %v\n", err)
		os.Exit(1)
	}
}
