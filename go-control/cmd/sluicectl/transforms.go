package main

import (
	"fmt"
	"net/url"
	"os"
	"strconv"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// TransformFileSizeMax bounds a module read by "transforms put" (the
// daemon's limit).
const TransformFileSizeMax = 8 << 20

// rawBody is a request body sent as it is, not as JSON.
type rawBody struct {
	data        []byte
	contentType string
}

const transformsUsage = "usage: sluicectl transforms ls | put SUBJECT FROM TO FILE.wasm | rm SUBJECT FROM TO"

func transforms(c *client, p *printer, rest []string) error {
	if len(rest) == 0 || rest[0] == "ls" && len(rest) == 1 {
		return transformsList(c, p)
	}
	switch {
	case rest[0] == "put" && len(rest) == 5:
		return transformPut(c, p, rest[1], rest[2], rest[3], rest[4])
	case rest[0] == "rm" && len(rest) == 4:
		return transformRemove(c, p, rest[1], rest[2], rest[3])
	}
	return usageError(transformsUsage)
}

// transformPath checks the pair and makes the path.
func transformPath(subject, from, to string) (string, error) {
	for _, v := range []string{from, to} {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			return "", usageError(fmt.Sprintf("version %q: a number of at least 1\n%s", v, transformsUsage))
		}
	}
	return "/v1/transforms/" + url.PathEscape(subject) + "/" + from + "/" + to, nil
}

func transformsList(c *client, p *printer) error {
	var ts []engine.TransformStatus
	raw, err := c.call("GET", "/v1/transforms", nil, &ts)
	if err != nil || p.json {
		if err == nil {
			p.raw(raw)
		}
		return err
	}
	if len(ts) == 0 {
		fmt.Fprintln(p.w, "no schema transforms (docs/transforms.md)")
		return nil
	}
	var rows [][]string
	for _, t := range ts {
		state := "serving"
		if t.QuarantinedWorkers > 0 {
			state = fmt.Sprintf("quarantined on %d", t.QuarantinedWorkers)
		}
		rows = append(rows, []string{t.Subject, fmt.Sprintf("%d->%d", t.From, t.To), t.Digest, fmt.Sprint(t.Bytes),
			state, fmt.Sprint(t.Calls), fmt.Sprint(t.OK), fmt.Sprint(t.Refused), fmt.Sprint(t.Traps),
			fmt.Sprint(t.Timeouts), fmt.Sprint(t.OutOfMemory), fmt.Sprint(t.BadOutputs), fmt.Sprint(t.Quarantines),
			dash(t.LastFault)})
	}
	p.table("SUBJECT\tVERSIONS\tDIGEST\tBYTES\tSTATE\tCALLS\tOK\tREFUSED\tTRAPS\tTIMEOUTS\tOOM\tBAD_OUTPUTS\tQUARANTINES\tLAST_FAULT", rows)
	return nil
}

func transformPut(c *client, p *printer, subject, from, to, file string) error {
	path, err := transformPath(subject, from, to)
	if err != nil {
		return err
	}
	st, err := os.Stat(file)
	if err != nil {
		return err
	}
	if st.Size() > TransformFileSizeMax {
		return fmt.Errorf("%s: %d bytes, over the %d-byte limit", file, st.Size(), TransformFileSizeMax)
	}
	wasm, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var put api.TransformPut
	raw, err := c.call("PUT", path, rawBody{wasm, "application/wasm"}, &put)
	if err != nil || p.json {
		if err == nil {
			p.raw(raw)
		}
		return err
	}
	fmt.Fprintf(p.w, "transform %s %d -> %d loaded (%d bytes); every worker serves it from epoch %d\n",
		put.Subject, put.From, put.To, put.Bytes, put.Epoch)
	return nil
}

func transformRemove(c *client, p *printer, subject, from, to string) error {
	path, err := transformPath(subject, from, to)
	if err != nil {
		return err
	}
	if _, err := c.call("DELETE", path, nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(p.w, "transform %s %s -> %s removed\n", subject, from, to)
	return nil
}
