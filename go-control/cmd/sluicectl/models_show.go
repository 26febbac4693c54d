package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// modelDoc is the part of GET /v1/models/{name} that `models show` prints.
type modelDoc struct {
	Name     string `json:"name"`
	Versions []struct {
		Version        string            `json:"version"`
		Aliases        []string          `json:"aliases"`
		Kind           string            `json:"kind"`
		Platform       string            `json:"platform"`
		Adapters       []string          `json:"adapters"`
		Inputs         []tensorDoc       `json:"inputs"`
		OptionalInputs []tensorDoc       `json:"optional_inputs"`
		Outputs        []tensorDoc       `json:"outputs"`
		Producer       string            `json:"producer"`
		Graph          string            `json:"graph"`
		ModelVersion   int64             `json:"model_version"`
		Metadata       map[string]string `json:"metadata"`
		Batchable      bool              `json:"batchable"`
		BatchRefusal   string            `json:"batch_refusal"`
		BatchMax       *int              `json:"batch_max"`
		BatchDelayUs   *int              `json:"batch_delay_us"`
	} `json:"versions"`
}

type tensorDoc struct {
	Name      string            `json:"name"`
	Datatype  string            `json:"datatype"`
	Dims      []json.RawMessage `json:"dims"`
	Placement string            `json:"placement"`
}

// shape prints dims as [batch, ?, 128]: sizes, symbols, ? for unnamed.
func (t tensorDoc) shape() string {
	parts := make([]string, len(t.Dims))
	for i, d := range t.Dims {
		var s string
		switch {
		case string(d) == "null":
			parts[i] = "?"
		case json.Unmarshal(d, &s) == nil:
			parts[i] = s
		default:
			parts[i] = string(d)
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// modelsShow prints one model's versions, inputs and outputs (with where
// each output is placed: in-place-preallocated or allocator-placed).
func modelsShow(c *client, p *printer, name string) error {
	var doc modelDoc
	if done, err := p.fetch(c, "GET", "/v1/models/"+url.PathEscape(name), nil, &doc); done {
		return err
	}
	for i, v := range doc.Versions {
		if i > 0 {
			fmt.Fprintln(p.w)
		}
		fmt.Fprintf(p.w, "model      %s\nversion    %s\nplatform   %s\naliases    %s\nadapters   %s\nproducer   %s\ngraph      %s\n",
			doc.Name, v.Version, v.Platform, or(strings.Join(v.Aliases, ","), "-"), or(strings.Join(v.Adapters, ","), "-"), or(v.Producer, "-"), or(v.Graph, "-"))
		fmt.Fprintf(p.w, "batching   %s\n", batching(v.Batchable, v.BatchRefusal, v.BatchMax, v.BatchDelayUs))
		var rows [][]string
		for _, t := range v.Inputs {
			rows = append(rows, []string{"input", t.Name, t.Datatype, t.shape(), "-"})
		}
		for _, t := range v.OptionalInputs {
			rows = append(rows, []string{"input (optional)", t.Name, t.Datatype, t.shape(), "-"})
		}
		for _, t := range v.Outputs {
			rows = append(rows, []string{"output", t.Name, t.Datatype, t.shape(), or(t.Placement, "-")})
		}
		if len(rows) > 0 {
			fmt.Fprintln(p.w)
			p.table("\tNAME\tDATATYPE\tSHAPE\tPLACEMENT", rows)
		}
	}
	return nil
}

// batching says whether requests stack into one run and with what limits
// (the model's own; without them its shard's batch_max applies).
func batching(ok bool, why string, batchMax, delayUs *int) string {
	if !ok {
		return "no (" + or(why, "not supported") + "): requests run one by one"
	}
	s := "yes (dimension 0)"
	if batchMax != nil {
		s += fmt.Sprintf(", batch_max %d", *batchMax)
		if delayUs != nil {
			s += fmt.Sprintf(", batch_delay_us %d", *delayUs)
		}
	} else {
		s += ", as its shard's batch_max"
	}
	return s
}
