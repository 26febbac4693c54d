// Package otelcoltest runs the project's real OpenTelemetry Collector
// (tests/otelcol: OTLP receiver, file exporter; built once into
// .cache/bin by scripts/build-otelcol.sh) for tests, and reads back the
// spans it wrote.
package otelcoltest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// root is the repository root (this file is go-control/internal/otelcoltest).
func root() string {
	_, f, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(f), "../../..")
}

func collectorBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLUICE_OTELCOL"); p != "" {
		return p
	}
	p := filepath.Join(root(), ".cache/bin/otelcol-sluice")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no collector at %s: run scripts/build-otelcol.sh (scripts/test.sh does)", p)
	}
	return p
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs the collector with an OTLP/HTTP receiver and a file
// exporter; returns the endpoint and the output file.
func Start(t *testing.T) (string, string) {
	t.Helper()
	bin := collectorBin(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "spans.json")
	port := freePort(t)
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
exporters:
  file:
    path: %s
    flush_interval: 50ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, port, out)
	cfgPath := filepath.Join(dir, "otelcol.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfgPath)
	logf, _ := os.Create(filepath.Join(dir, "otelcol.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("collector log:\n%s", b)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector did not listen on %d", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port), out
}

// Span is what the file exporter writes of a span (OTLP JSON).
type Span struct {
	TraceID           string `json:"traceId"`
	SpanID            string `json:"spanId"`
	ParentSpanID      string `json:"parentSpanId"`
	Name              string `json:"name"`
	StartTimeUnixNano string `json:"startTimeUnixNano"`
	EndTimeUnixNano   string `json:"endTimeUnixNano"`
	Attributes        []struct {
		Key   string `json:"key"`
		Value struct {
			StringValue *string `json:"stringValue"`
			IntValue    *string `json:"intValue"`
		} `json:"value"`
	} `json:"attributes"`
	Service string // service.name of its resource
}

// Attr is the value of attribute k as text ("" when absent).
func (s *Span) Attr(k string) string {
	for _, a := range s.Attributes {
		if a.Key == k {
			if a.Value.StringValue != nil {
				return *a.Value.StringValue
			}
			if a.Value.IntValue != nil {
				return *a.Value.IntValue
			}
		}
	}
	return ""
}

// Read returns every span the collector has written to path so far.
func Read(t *testing.T, path string) []Span {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var all []Span
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var doc struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []struct {
						Key   string `json:"key"`
						Value struct {
							StringValue string `json:"stringValue"`
						} `json:"value"`
					} `json:"attributes"`
				} `json:"resource"`
				ScopeSpans []struct {
					Spans []Span `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil {
			t.Fatalf("collector output is not OTLP JSON: %v", err)
		}
		for _, rs := range doc.ResourceSpans {
			svc := ""
			for _, a := range rs.Resource.Attributes {
				if a.Key == "service.name" {
					svc = a.Value.StringValue
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					s.Service = svc
					all = append(all, s)
				}
			}
		}
	}
	return all
}
