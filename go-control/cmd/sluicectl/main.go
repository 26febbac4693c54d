// Command sluicectl drives a running sluiced through its admin API.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/statusview"
)

const usage = `usage: sluicectl [-addr A] [-token T] [-json] COMMAND

commands:
  status                          engine and daemon status; backend pools and endpoints
  workers                         workers with their counters
  shards                          shards with their counters
  routes get                      the routes in force
  routes set FILE                 replace all routes (JSON array, {"routes":[...]}, or TOML [[routes]])
  routes reset                    drop routes set through the API; use the file's
  tenants                         tenants (keys are never shown)
  models                          loaded model versions and aliases
  models load -name N -version V -kind K [-path P] [-alias A]...
  models show NAME                inputs, outputs (shapes, placement, batching), platform, aliases
  models unload NAME VERSION      unload a version from every core (also one from the file)
  alias set MODEL ALIAS VERSION   point an alias at a version
  peers ls | add NAME ADDR [LABEL=VALUE]... | rm NAME
  backends                        backend pools: each endpoint ready, not ready, ejected or draining; in flight, requests, failures
  backends add|drain|undrain|remove POOL URL   change a pool's endpoints (kept across restarts; the fleet's in fleet mode)
  connections                     connections (RDMA, TCP) with their counters
  connections close ID            disconnect one; its requests in flight fail, retryably
  stats                           counters and latency per worker and shard
  reload                          re-read the config file on the daemon
  transforms ls                   schema transforms (WebAssembly) with their counters and quarantines
  transforms put SUBJECT FROM TO FILE.wasm   load or replace one; every worker swaps at a burst boundary
  transforms rm SUBJECT FROM TO   remove one
  jobs                            JetStream ingress: per stream lag, in flight, acked, nak'ed, dead-lettered, redelivered
  infer MODEL VERSION --input NAME=FILE.npy|FILE.json|@JSON ...  one inference request (infer -h)
  schemas diff SUBJECT V1 V2      per-field verdicts (backward, forward) between two registry versions
  schemas contract SUBJECT V      the contract snapshot of a version: fingerprint, fields, types

environment: SLUICE_ADDR (host:port or unix:/path), SLUICE_TOKEN
`

// FileSizeMax bounds a file read by "routes set", in bytes.
const FileSizeMax = 1 << 20

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

type client struct {
	base  string
	token string
	http  *http.Client
}

// apiError is an error reply of the admin API (its body is api.Error).
type apiError struct {
	Status int
	Body   api.Error
}

func (e *apiError) Error() string {
	if e.Status == http.StatusUnauthorized {
		return "unauthorized: pass the admin token with -token or SLUICE_TOKEN"
	}
	if e.Body.Message == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return fmt.Sprintf("%s (%s)", e.Body.Message, e.Body.Code)
}

func newClient(addr, token string, timeout time.Duration) *client {
	c := &client{token: token, http: &http.Client{Timeout: timeout}}
	if sock, ok := strings.CutPrefix(addr, "unix:"); ok {
		c.base = "http://sluiced"
		c.http.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}
	} else if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		c.base = strings.TrimSuffix(addr, "/")
	} else {
		c.base = "http://" + addr
	}
	return c
}

// call sends body (if not nil) as JSON and decodes the reply into out (if
// not nil); raw receives the reply bytes.
func (c *client) call(method, path string, body, out any) ([]byte, error) {
	var rd io.Reader
	ctype := "application/json"
	if rb, ok := body.(rawBody); ok {
		rd, ctype = bytes.NewReader(rb.data), rb.contentType
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		e := &apiError{Status: resp.StatusCode}
		_ = json.Unmarshal(raw, &e.Body)
		return raw, e
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return raw, fmt.Errorf("bad reply from the daemon: %w", err)
		}
	}
	return raw, nil
}

func run(args []string, env func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluicectl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	addr := fs.String("addr", or(env("SLUICE_ADDR"), "127.0.0.1:7071"), "admin API address: host:port, http://host:port or unix:/path")
	token := fs.String("token", env("SLUICE_TOKEN"), "admin bearer token")
	asJSON := fs.Bool("json", false, "print the daemon's JSON instead of tables")
	timeout := fs.Duration("timeout", 30*time.Second, "request timeout")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	c := newClient(*addr, *token, *timeout)
	out := &printer{w: stdout, json: *asJSON}
	err := dispatch(c, out, fs.Args())
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "sluicectl: %s\n\n%s", ue, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl: %v\n", err)
		return 1
	}
	return 0
}

type usageError string

func (u usageError) Error() string { return string(u) }

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

type printer struct {
	w    io.Writer
	json bool
}

// table prints rows under a header, aligned.
func (p *printer) table(header string, rows [][]string) {
	tw := tabwriter.NewWriter(p.w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// fetch calls the daemon and, with -json, prints its reply as it came.
// done is true when the caller has nothing left to print: the call failed
// or the JSON was the output.
func (p *printer) fetch(c *client, method, path string, body, out any) (done bool, err error) {
	raw, err := c.call(method, path, body, out)
	if err != nil {
		return true, err
	}
	if p.json {
		p.raw(raw)
		return true, nil
	}
	return false, nil
}

// raw prints the daemon's JSON reply, indented.
func (p *printer) raw(b []byte) {
	var buf bytes.Buffer
	if json.Indent(&buf, b, "", "  ") != nil {
		p.w.Write(b)
		return
	}
	buf.WriteByte('\n')
	p.w.Write(buf.Bytes())
}

func dispatch(c *client, p *printer, args []string) error {
	cmd, rest := args[0], args[1:]
	want := func(n int, form string) error {
		if len(rest) != n {
			return usageError("usage: sluicectl " + form)
		}
		return nil
	}
	switch cmd {
	case "status":
		if err := want(0, "status"); err != nil {
			return err
		}
		return status(c, p)
	case "workers":
		return workers(c, p)
	case "shards":
		return shards(c, p)
	case "routes":
		return routesCmd(c, p, rest)
	case "tenants":
		return tenants(c, p)
	case "models":
		return modelsCmd(c, p, rest)
	case "alias":
		return aliasSet(c, p, rest)
	case "peers":
		return peers(c, p, rest)
	case "backends":
		return backendsCmd(c, p, rest)
	case "connections":
		switch {
		case len(rest) == 0:
			return connections(c, p)
		case len(rest) == 2 && rest[0] == "close":
			return connectionClose(c, p, rest[1])
		}
		return usageError("usage: sluicectl connections [close ID]")
	case "stats":
		return stats(c, p)
	case "infer":
		return infer(c, p, rest)
	case "reload":
		return reload(c, p)
	case "jobs":
		return jobs(c, p, rest)
	case "transforms":
		return transforms(c, p, rest)
	case "schemas":
		return schemasCmd(c, p, rest)
	case "help", "-h", "--help":
		fmt.Fprint(p.w, usage)
		return nil
	}
	return usageError(fmt.Sprintf("unknown command %q", cmd))
}

func routesCmd(c *client, p *printer, rest []string) error {
	switch {
	case len(rest) == 1 && rest[0] == "get":
		return routesGet(c, p)
	case len(rest) == 2 && rest[0] == "set":
		return routesSet(c, p, rest[1])
	case len(rest) == 1 && rest[0] == "reset":
		_, err := c.call("DELETE", "/v1/routes", nil, nil)
		if err == nil && !p.json {
			fmt.Fprintln(p.w, "routes: back to the config file")
		}
		return err
	}
	return usageError("usage: sluicectl routes get|set FILE|reset")
}

func modelsCmd(c *client, p *printer, rest []string) error {
	switch {
	case len(rest) == 0:
		return models(c, p)
	case rest[0] == "load":
		return modelsLoad(c, p, rest[1:])
	case rest[0] == "unload" && len(rest) == 3:
		return modelsUnload(c, p, rest[1], rest[2])
	case rest[0] == "show" && len(rest) == 2:
		return modelsShow(c, p, rest[1])
	}
	return usageError("usage: sluicectl models [load ...|unload NAME VERSION|show NAME]")
}

func aliasSet(c *client, p *printer, rest []string) error {
	if len(rest) != 4 || rest[0] != "set" {
		return usageError("usage: sluicectl alias set MODEL ALIAS VERSION")
	}
	path := "/v1/models/" + url.PathEscape(rest[1]) + "/aliases/" + url.PathEscape(rest[2])
	raw, err := c.call("PUT", path, api.AliasBody{Version: rest[3]}, nil)
	if err != nil {
		return err
	}
	if p.json {
		p.raw(raw)
	} else {
		fmt.Fprintf(p.w, "%s alias %s -> %s\n", rest[1], rest[2], rest[3])
	}
	return nil
}

func reload(c *client, p *printer) error {
	var res api.ReloadResult
	raw, err := c.call("POST", "/v1/reload", nil, &res)
	if err != nil {
		return err
	}
	if p.json {
		p.raw(raw)
		return nil
	}
	fmt.Fprintf(p.w, "reloaded; applied: %s\n", listOr(res.Applied, "nothing changed"))
	if len(res.RestartRequired) > 0 {
		fmt.Fprintf(p.w, "changed but needs a restart: %s\n", strings.Join(res.RestartRequired, ", "))
	}
	return nil
}

func connections(c *client, p *printer) error {
	var cs []engine.Connection
	if done, err := p.fetch(c, "GET", "/v1/connections", nil, &cs); done {
		return err
	}
	var rows [][]string
	for _, k := range cs {
		rows = append(rows, []string{fmt.Sprint(k.ID), k.Transport, fmt.Sprint(k.Worker), or(k.Peer, "-"), or(k.Device, "-"), k.State,
			fmt.Sprint(k.RxFrames), fmt.Sprint(k.RxBytes), fmt.Sprint(k.TxFrames), fmt.Sprint(k.TxBytes),
			fmt.Sprintf("%d/%d", k.RxLarge, k.TxLarge), fmt.Sprint(k.Errors), or(k.Role, "-")})
	}
	p.table("ID\tTRANSPORT\tWORKER\tPEER\tDEVICE\tSTATE\tRX_FRAMES\tRX_BYTES\tTX_FRAMES\tTX_BYTES\tWRITES_RX/TX\tERRORS\tROLE", rows)
	fmt.Fprintf(p.w, "(%d connections)\n", len(cs))
	return nil
}

func connectionClose(c *client, p *printer, id string) error {
	raw, err := c.call("DELETE", "/v1/connections/"+url.PathEscape(id), nil, nil)
	if err != nil {
		return err
	}
	if p.json {
		p.raw(raw)
	} else {
		fmt.Fprintf(p.w, "connection %s: closing (requests in flight fail with a retryable error: connection loss on a client, peer_down for a peer connection)\n", id)
	}
	return nil
}

func listOr(l []string, empty string) string {
	if len(l) == 0 {
		return empty
	}
	return strings.Join(l, ", ")
}

func status(c *client, p *printer) error {
	var st api.StatusDoc
	if done, err := p.fetch(c, "GET", "/v1/status", nil, &st); done {
		return err
	}
	statusview.Write(p.w, st)
	return nil
}

func us(ns uint64) string { return fmt.Sprintf("%.1f", float64(ns)/1e3) }

func sumErrors(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

func workers(c *client, p *printer) error {
	var ws []api.WorkerDoc
	if done, err := p.fetch(c, "GET", "/v1/workers", nil, &ws); done {
		return err
	}
	var rows [][]string
	for _, w := range ws {
		row := []string{fmt.Sprint(w.Index), fmt.Sprint(w.Core), fmt.Sprint(w.Epoch)}
		if s := w.Stats; s != nil {
			row = append(row, fmt.Sprint(s.Requests()), fmt.Sprint(sumErrors(s.Errors)), fmt.Sprintf("%d/%d", s.RxInUse, s.TxInUse),
				fmt.Sprint(s.PayloadBytesCopied), us(s.Latency.P50Ns), us(s.Latency.P99Ns))
		}
		rows = append(rows, row)
	}
	p.table("WORKER\tCORE\tEPOCH\tREQUESTS\tERRORS\tRX/TX_IN_USE\tBYTES_COPIED\tP50_US\tP99_US", rows)
	return nil
}

func labels(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return or(strings.Join(parts, ","), "-")
}

func shards(c *client, p *printer) error {
	var ss []api.ShardDoc
	if done, err := p.fetch(c, "GET", "/v1/shards", nil, &ss); done {
		return err
	}
	var rows [][]string
	for _, s := range ss {
		where := "remote"
		if s.Local {
			where = "local"
		}
		row := []string{s.Name, labels(s.Labels), where, fmt.Sprint(s.MaxConcurrency), fmt.Sprint(s.QueueDepth)}
		if st := s.Stats; st != nil {
			row = append(row, fmt.Sprint(st.Requests), fmt.Sprint(st.Errors), us(st.Queue.P99Ns), us(st.Service.P50Ns), us(st.Service.P99Ns))
		}
		rows = append(rows, row)
	}
	p.table("SHARD\tLABELS\tWHERE\tMAX_CONC\tDEPTH\tREQUESTS\tERRORS\tQUEUE_P99_US\tP50_US\tP99_US", rows)
	return nil
}

func dash(s string) string { return or(s, "*") }

func printRoutes(p *printer, doc api.RoutesDoc) {
	var rows [][]string
	for _, r := range doc.Routes {
		rows = append(rows, []string{r.Name, dash(r.Model), dash(r.Version), dash(r.Adapter), dash(r.Intent), dash(r.Tenant), r.Shard})
	}
	p.table("NAME\tMODEL\tVERSION\tADAPTER\tINTENT\tTENANT\tSHARD", rows)
	fmt.Fprintf(p.w, "(%d routes from the %s; first match wins)\n", len(doc.Routes), doc.Source)
}

func routesGet(c *client, p *printer) error {
	var doc api.RoutesDoc
	if done, err := p.fetch(c, "GET", "/v1/routes", nil, &doc); done {
		return err
	}
	printRoutes(p, doc)
	return nil
}

// readRoutes reads a routes file: JSON (array or {"routes": [...]}) or TOML
// with [[routes]] tables only; unknown keys are errors.
func readRoutes(path string) ([]config.Route, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, FileSizeMax+1))
	if err != nil {
		return nil, err
	}
	if len(b) > FileSizeMax {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, FileSizeMax)
	}
	// Source is accepted so that `sluicectl -json routes get` output can be
	// edited and set again.
	var doc struct {
		Source string         `toml:"-" json:"source"`
		Routes []config.Route `toml:"routes" json:"routes"`
	}
	if strings.HasSuffix(path, ".toml") {
		d := toml.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if err := d.Decode(&doc); err != nil {
			var de *toml.DecodeError
			if errors.As(err, &de) {
				line, _ := de.Position()
				return nil, fmt.Errorf("%s:%d: %w", path, line, err)
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return doc.Routes, nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	t := bytes.TrimSpace(b)
	if len(t) > 0 && t[0] == '[' {
		err = d.Decode(&doc.Routes)
	} else {
		err = d.Decode(&doc)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return doc.Routes, nil
}

func routesSet(c *client, p *printer, path string) error {
	routes, err := readRoutes(path)
	if err != nil {
		return err
	}
	if routes == nil {
		routes = []config.Route{}
	}
	var doc api.RoutesDoc
	if done, err := p.fetch(c, "PUT", "/v1/routes", routes, &doc); done {
		return err
	}
	printRoutes(p, doc)
	return nil
}

func tenants(c *client, p *printer) error {
	var ts []api.TenantView
	if done, err := p.fetch(c, "GET", "/v1/tenants", nil, &ts); done {
		return err
	}
	var rows [][]string
	for _, t := range ts {
		list := func(l []string) string { return or(strings.Join(l, ","), "-") }
		rows = append(rows, []string{t.Name, fmt.Sprint(t.ID), list(t.Models), list(t.Adapters), list(t.Routes), list(t.Subjects)})
	}
	p.table("NAME\tID\tMODELS\tADAPTERS\tROUTES\tSUBJECTS", rows)
	return nil
}

func models(c *client, p *printer) error {
	var ms []engine.ModelInfo
	if done, err := p.fetch(c, "GET", "/v1/models", nil, &ms); done {
		return err
	}
	var rows [][]string
	for _, m := range ms {
		rows = append(rows, []string{m.Name, m.Version, m.Kind, or(strings.Join(m.Aliases, ","), "-"), or(strings.Join(m.Adapters, ","), "-")})
	}
	p.table("MODEL\tVERSION\tKIND\tALIASES\tADAPTERS", rows)
	return nil
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func modelsLoad(c *client, p *printer, args []string) error {
	fs := flag.NewFlagSet("models load", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var m config.Model
	var aliases multi
	fs.StringVar(&m.Name, "name", "", "model name")
	fs.StringVar(&m.Version, "version", "", "model version")
	fs.StringVar(&m.Kind, "kind", "onnx", "onnx, null, echo or backend")
	fs.StringVar(&m.Path, "path", "", "path of the .onnx file on the daemon's host")
	fs.StringVar(&m.Upstream, "upstream", "", "kind backend: the name the backends serve it as (default: -name)")
	fs.Var(&aliases, "alias", "alias (repeatable)")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 || m.Name == "" || m.Version == "" {
		return usageError("usage: sluicectl models load -name N -version V -kind onnx|null|echo|backend [-path P] [-upstream U] [-alias A]...")
	}
	if m.Path != "" && !filepath.IsAbs(m.Path) {
		abs, err := filepath.Abs(m.Path)
		if err != nil {
			return err
		}
		m.Path = abs
	}
	m.Aliases = aliases
	raw, err := c.call("POST", "/v1/models", m, nil)
	if err != nil {
		return err
	}
	if p.json {
		p.raw(raw)
	} else {
		fmt.Fprintf(p.w, "loaded %s %s (%s)\n", m.Name, m.Version, m.Kind)
	}
	return nil
}

func modelsUnload(c *client, p *printer, name, version string) error {
	path := "/v1/models/" + url.PathEscape(name) + "/versions/" + url.PathEscape(version)
	if _, err := c.call("DELETE", path, nil, nil); err != nil {
		return err
	}
	if !p.json {
		fmt.Fprintf(p.w, "unloaded %s %s (it stays unloaded across reloads until loaded again)\n", name, version)
	}
	return nil
}

func peers(c *client, p *printer, args []string) error {
	if len(args) == 0 {
		return usageError("usage: sluicectl peers ls | add NAME ADDR [LABEL=VALUE]... | rm NAME")
	}
	switch args[0] {
	case "ls":
		var ps []engine.PeerStatus
		if done, err := p.fetch(c, "GET", "/v1/peers", nil, &ps); done {
			return err
		}
		var rows [][]string
		for _, x := range ps {
			rows = append(rows, []string{x.Name, x.Address, labels(x.Labels), or(x.State, "-")})
		}
		p.table("NAME\tADDRESS\tLABELS\tSTATE", rows)
		return nil
	case "add":
		if len(args) < 3 {
			return usageError("usage: sluicectl peers add NAME ADDR [LABEL=VALUE]...")
		}
		peer := config.Peer{Name: args[1], Address: args[2], Labels: map[string]string{}}
		for _, kv := range args[3:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return usageError(fmt.Sprintf("label %q is not LABEL=VALUE", kv))
			}
			peer.Labels[k] = v
		}
		raw, err := c.call("POST", "/v1/peers", peer, nil)
		if err != nil {
			return err
		}
		if p.json {
			p.raw(raw)
		} else {
			fmt.Fprintf(p.w, "peer %s added\n", peer.Name)
		}
		return nil
	case "rm":
		if len(args) != 2 {
			return usageError("usage: sluicectl peers rm NAME")
		}
		if _, err := c.call("DELETE", "/v1/peers/"+url.PathEscape(args[1]), nil, nil); err != nil {
			return err
		}
		if !p.json {
			fmt.Fprintf(p.w, "peer %s removed\n", args[1])
		}
		return nil
	}
	return usageError("usage: sluicectl peers ls | add NAME ADDR [LABEL=VALUE]... | rm NAME")
}

func errorList(m map[string]uint64) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(parts)
	return or(strings.Join(parts, ","), "-")
}

func stats(c *client, p *printer) error {
	var st engine.Stats
	if done, err := p.fetch(c, "GET", "/v1/stats", nil, &st); done {
		return err
	}
	var rows [][]string
	row := func(where string, n uint64, errs string, l engine.Latency) {
		rows = append(rows, []string{where, fmt.Sprint(n), errs, us(l.P50Ns), us(l.P90Ns), us(l.P99Ns), us(l.P999Ns), us(l.MaxNs)})
	}
	for _, w := range st.Workers {
		row(fmt.Sprintf("worker %d (core %d)", w.Index, w.Core), w.Requests(), errorList(w.Errors), w.Latency)
	}
	for _, s := range st.Shards {
		row("shard "+s.Name+" queue", s.Requests, fmt.Sprint(s.Errors), s.Queue)
		row("shard "+s.Name+" service", s.Requests, fmt.Sprint(s.Errors), s.Service)
	}
	p.table("WHERE\tREQUESTS\tERRORS\tP50_US\tP90_US\tP99_US\tP99.9_US\tMAX_US", rows)
	poolTable(p, st)
	return nil
}

// poolTable prints each worker's buffer pools (use, reuse, pages), the
// payload it copied by path and its kernel socket drops.
func poolTable(p *printer, st engine.Stats) {
	var rows [][]string
	for _, w := range st.Workers {
		who := fmt.Sprintf("worker %d", w.Index)
		for _, pl := range w.Pools {
			pages := "normal"
			if pl.HugeBytes > 0 {
				pages = "huge"
			}
			rows = append(rows, []string{who, "pool " + pl.Pool, fmt.Sprint(pl.Capacity), fmt.Sprint(pl.InUse), fmt.Sprint(pl.Allocs),
				fmt.Sprint(pl.FirstTouches), fmt.Sprint(pl.Reuses), fmt.Sprintf("%.3f", pl.ReuseRatio), fmt.Sprintf("%s %d KiB", pages, (pl.HugeBytes+pl.NormalBytes)>>10)})
		}
		for _, c := range w.Copies {
			rows = append(rows, []string{who, "copied " + c.Path, "-", "-", fmt.Sprint(c.Frames), "-", "-", "-", fmt.Sprintf("%d B (%s)", c.Bytes, c.Reason)})
		}
		rows = append(rows, []string{who, "kernel drops", "-", "-", fmt.Sprint(w.RxKernelDrops), "-", "-", "-", "SO_RXQ_OVFL"})
	}
	p.table("WORKER\tWHAT\tBUFFERS\tIN_USE\tCOUNT\tFIRST_TOUCH\tREUSES\tREUSE_RATIO\tNOTE", rows)
}
