package main

import (
	"fmt"
	"net/url"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

const backendsUsage = "usage: sluicectl backends [ls] | add|drain|undrain|remove POOL URL"

// backendsCmd lists the backend pools' endpoints or changes one
// (docs/backends.md, "Endpoints at run time").
func backendsCmd(c *client, p *printer, rest []string) error {
	if len(rest) == 0 || len(rest) == 1 && rest[0] == "ls" {
		return backendsList(c, p)
	}
	op, err := parseEndpointOp(rest)
	if err != nil {
		return err
	}
	return endpointChange(c, p, op)
}

// parseEndpointOp reads ACTION POOL URL.
func parseEndpointOp(args []string) (engine.EndpointOp, error) {
	if len(args) != 3 {
		return engine.EndpointOp{}, usageError(backendsUsage)
	}
	for _, a := range engine.EndpointActions {
		if args[0] == string(a) {
			return engine.EndpointOp{Pool: args[1], URL: args[2], Action: a}, nil
		}
	}
	return engine.EndpointOp{}, usageError(fmt.Sprintf("unknown backends action %q\n%s", args[0], backendsUsage))
}

// endpointState names what an endpoint does now: draining (asked to take
// nothing new) wins over ejected (after failures in a row), then ready or
// not ready (its last health check).
func endpointState(e engine.BackendEndpoint) string {
	switch {
	case e.Draining:
		return "draining"
	case e.Ejected:
		return "ejected"
	case e.Healthy:
		return "ready"
	}
	return "not ready"
}

// backendRows is one row per endpoint of every pool.
func backendRows(doc engine.BackendsStatus) [][]string {
	var rows [][]string
	for _, pl := range doc.Pools {
		for _, e := range pl.Endpoints {
			rows = append(rows, []string{pl.Name, e.URL, endpointState(e), fmt.Sprint(e.InFlight), fmt.Sprint(e.Requests), fmt.Sprint(e.Failures)})
		}
		if len(pl.Endpoints) == 0 {
			rows = append(rows, []string{pl.Name, "-", "no endpoints", "-", "-", "-"})
		}
	}
	return rows
}

func backendsList(c *client, p *printer) error {
	var doc engine.BackendsStatus
	if done, err := p.fetch(c, "GET", "/v1/backends", nil, &doc); done {
		return err
	}
	if len(doc.Pools) == 0 {
		fmt.Fprintln(p.w, "no [[backends]] configured (docs/backends.md)")
		return nil
	}
	p.table("POOL\tURL\tSTATE\tIN_FLIGHT\tREQUESTS\tFAILURES", backendRows(doc))
	return nil
}

func endpointChange(c *client, p *printer, op engine.EndpointOp) error {
	path := "/v1/backends/" + url.PathEscape(op.Pool) + "/endpoints"
	var raw []byte
	var err error
	switch op.Action {
	case engine.EndpointAdd:
		raw, err = c.call("POST", path, api.EndpointBody{URL: op.URL}, nil)
	case engine.EndpointDrain, engine.EndpointUndrain:
		raw, err = c.call("POST", path+"/"+string(op.Action), api.EndpointBody{URL: op.URL}, nil)
	case engine.EndpointRemove:
		raw, err = c.call("DELETE", path+"?url="+url.QueryEscape(op.URL), nil, nil)
	}
	if err != nil {
		return err
	}
	if p.json {
		if len(raw) > 0 {
			p.raw(raw)
		}
		return nil
	}
	what := map[engine.EndpointAction]string{
		engine.EndpointAdd:     "added: takes requests once a health check sees it ready",
		engine.EndpointDrain:   "draining: takes nothing new, finishes what it holds",
		engine.EndpointUndrain: "undrained: takes requests again",
		engine.EndpointRemove:  "removed: the requests it holds finish",
	}[op.Action]
	fmt.Fprintf(p.w, "%s %s %s\n", op.Pool, op.URL, what)
	return nil
}
