package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	sluice "github.com/sluice-ai/sluice/clients/go"
)

const inferUsage = `usage: sluicectl infer MODEL VERSION --input NAME[:DTYPE]=SRC ... [flags]

Sends one inference request to the data plane and prints the outputs.

  --input NAME[:DTYPE]=SRC  an input tensor (repeat for several). SRC is
                            FILE.npy (DTYPE converts, e.g. f64 -> f32),
                            FILE.json, or @JSON inline: a number, a nested
                            array, or {"dtype":"i64","shape":[2],"data":[1,2]}.
                            JSON numbers are f32 unless DTYPE says otherwise.
  --adapter A               LoRA adapter id
  --intent I                intent
  --deadline D              deadline from now (250ms, 2s), written into the frame
  --timeout D               how long to wait for the answer (default 5s, or the deadline)
  --tenant N --key K        tenant id and key ("hex:..." or the key text);
                            env SLUICE_TENANT, SLUICE_KEY
  --section @JSON|FILE      a structured section, with --schema ID[:VERSION]
                            or --subject S (negotiated in-band)
  --output json|npy         print JSON (default), or write DIR/NAME.npy per output
  --out DIR                 the directory for --output npy (default .)
  --data ADDR               data-plane address (env SLUICE_DATA; default: the
                            daemon's, from its status)
  --transport udp|tcp       (default udp)
`

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

type inferFlags struct {
	inputs                    multiFlag
	adapter, intent           string
	deadline, timeout         time.Duration
	tenant                    uint
	key, section, subject     string
	schema, output, out, data string
	transport                 string
}

func parseInferFlags(args []string) (*inferFlags, []string, error) {
	f := &inferFlags{}
	fs := flag.NewFlagSet("infer", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&f.inputs, "input", "")
	fs.StringVar(&f.adapter, "adapter", "", "")
	fs.StringVar(&f.intent, "intent", "", "")
	fs.DurationVar(&f.deadline, "deadline", 0, "")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "")
	tenant, _ := strconv.ParseUint(os.Getenv("SLUICE_TENANT"), 10, 32)
	fs.UintVar(&f.tenant, "tenant", uint(tenant), "")
	fs.StringVar(&f.key, "key", os.Getenv("SLUICE_KEY"), "")
	fs.StringVar(&f.section, "section", "", "")
	fs.StringVar(&f.subject, "subject", "", "")
	fs.StringVar(&f.schema, "schema", "", "")
	fs.StringVar(&f.output, "output", "json", "")
	fs.StringVar(&f.out, "out", ".", "")
	fs.StringVar(&f.data, "data", os.Getenv("SLUICE_DATA"), "")
	fs.StringVar(&f.transport, "transport", "udp", "")
	// Flags may come before, between or after MODEL and VERSION.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, nil, err
			}
			return nil, nil, usageError("infer: " + err.Error() + " (sluicectl infer -h)")
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	switch {
	case len(pos) != 2:
		return nil, nil, usageError("infer takes MODEL and VERSION (sluicectl infer -h)")
	case len(f.inputs) == 0 && f.section == "":
		return nil, nil, usageError("infer needs at least one --input (sluicectl infer -h)")
	case f.output != "json" && f.output != "npy":
		return nil, nil, usageError("--output is json or npy")
	case f.tenant > 1<<32-1:
		return nil, nil, usageError("--tenant is a u32")
	case f.section != "" && f.schema == "" && f.subject == "":
		return nil, nil, usageError("--section needs --schema ID[:VERSION] or --subject S")
	}
	return f, pos, nil
}

// infer is `sluicectl infer`: one request through the Go client.
func infer(c *client, p *printer, args []string) error {
	f, pos, err := parseInferFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(p.w, inferUsage)
		return nil
	}
	if err != nil {
		return err
	}
	req := sluice.NewRequest(pos[0], pos[1])
	req.Adapter, req.Intent = f.adapter, f.intent
	for _, in := range f.inputs {
		t, err := parseInput(in)
		if err != nil {
			return err
		}
		req.Inputs = append(req.Inputs, t)
	}
	key, err := parseKey(f.key)
	if err != nil {
		return err
	}
	addr, err := dataAddr(c, f.data)
	if err != nil {
		return err
	}
	wait := f.timeout
	if f.deadline > 0 {
		wait = f.deadline
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if f.deadline > 0 {
		req.Deadline = time.Now().Add(f.deadline)
	}
	cl, err := sluice.Dial(ctx, addr, sluice.Options{TenantID: uint32(f.tenant), Key: key, Transport: f.transport, Timeout: wait})
	if err != nil {
		return fmt.Errorf("data plane %s: %w", addr, err)
	}
	defer cl.Close()
	if f.section != "" {
		if err := setSection(ctx, cl, req, f); err != nil {
			return err
		}
	}
	start := time.Now()
	resp, err := cl.Infer(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Release()
	latency := time.Since(start)
	if f.output == "npy" {
		paths, err := writeNpy(resp, f.out)
		for i, path := range paths {
			fmt.Fprintf(p.w, "%s\t%s\n", path, resp.Outputs[i])
		}
		return err
	}
	_, err = p.w.Write(outputsJSON(resp, latency.Microseconds()))
	return err
}

// parseKey reads "hex:..." or the key's text.
func parseKey(k string) ([]byte, error) {
	if k == "" {
		return nil, nil
	}
	if h, ok := strings.CutPrefix(k, "hex:"); ok {
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, usageError("--key hex:...: " + err.Error())
		}
		return b, nil
	}
	return []byte(k), nil
}

// dataAddr is --data, or the engine's listen address from the daemon.
func dataAddr(c *client, flagAddr string) (string, error) {
	if flagAddr != "" {
		return flagAddr, nil
	}
	var st struct {
		Engine struct {
			Listen string `json:"listen"`
		} `json:"engine"`
	}
	if _, err := c.call("GET", "/v1/status", nil, &st); err != nil {
		return "", fmt.Errorf("no --data address, and the daemon's status is not available: %w", err)
	}
	host, port, err := net.SplitHostPort(st.Engine.Listen)
	if err != nil {
		return "", fmt.Errorf("the daemon reports no usable data-plane address (%q); pass --data", st.Engine.Listen)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1" // listening on every address: this host is one
	}
	return net.JoinHostPort(host, port), nil
}

func setSection(ctx context.Context, cl *sluice.Client, req *sluice.Request, f *inferFlags) error {
	if src, ok := strings.CutPrefix(f.section, "@"); ok {
		req.Section = []byte(src)
	} else {
		b, err := readBounded(f.section, InputFileSizeMax)
		if err != nil {
			return fmt.Errorf("--section: %w", err)
		}
		req.Section = b
	}
	if f.subject != "" {
		s, err := cl.Negotiate(ctx, f.subject, 0)
		if err != nil {
			return fmt.Errorf("--subject %s: %w", f.subject, err)
		}
		req.SchemaID, req.SchemaVersion = s.SchemaID, s.Version
		return nil
	}
	id, ver, _ := strings.Cut(f.schema, ":")
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil {
		return usageError("--schema ID[:VERSION]: " + f.schema)
	}
	req.SchemaID = uint32(n)
	if ver != "" {
		v, err := strconv.ParseUint(ver, 10, 32)
		if err != nil {
			return usageError("--schema ID[:VERSION]: " + f.schema)
		}
		req.SchemaVersion = uint32(v)
	}
	return nil
}
