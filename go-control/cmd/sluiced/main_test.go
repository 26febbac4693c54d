package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// build compiles sluiced once for the tests that run it as a process, with
// the in-memory engine (tag sluicefake) so they need no cores or sockets.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluiced")
	out, err := exec.Command("go", "build", "-tags", "sluicefake", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func writeConfig(t *testing.T, edits ...string) string {
	t.Helper()
	b, err := os.ReadFile("../../../cfg/sluice.toml")
	if err != nil {
		t.Fatal(err)
	}
	src := strings.NewReplacer(append([]string{`admin_listen = "127.0.0.1:7071"`, `admin_listen = "127.0.0.1:0"`,
		`data_dir = "../.cache/sluice-data"`, `data_dir = "data"`}, edits...)...).Replace(string(b))
	path := filepath.Join(t.TempDir(), "sluice.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestProcess(t *testing.T) {
	bin := build(t)

	t.Run("check refuses a bad file with file:line", func(t *testing.T) {
		path := writeConfig(t, "rx_burst_max = 32", "rx_burst_max = 512")
		out, err := exec.Command(bin, "-check", "-config", path).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("exit: %v\n%s", err, out)
		}
		if !regexp.MustCompile(regexp.QuoteMeta(path) + `:\d+: engine.rx_burst_max: 512 is out of range 1..=256`).Match(out) {
			t.Fatalf("message: %s", out)
		}
	})

	t.Run("an engine that is not built in is refused, never replaced by the fake", func(t *testing.T) {
		out, err := exec.Command(bin, "-engine", "bogus", "-config", writeConfig(t)).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 || !strings.Contains(string(out), "not built in") {
			t.Fatalf("exit: %v\n%s", err, out)
		}
	})

	t.Run("serves, then drains on SIGTERM", func(t *testing.T) {
		cmd := exec.Command(bin, "-engine", "fake", "-config", writeConfig(t))
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		// The log line names the bound address.
		lines := bufio.NewScanner(stderr)
		addrRe := regexp.MustCompile(`sluiced serving" admin=(\S+)`)
		var addr string
		deadline := time.Now().Add(20 * time.Second)
		for addr == "" && time.Now().Before(deadline) && lines.Scan() {
			if m := addrRe.FindStringSubmatch(lines.Text()); m != nil {
				addr = m[1]
			}
		}
		if addr == "" {
			t.Fatal("no serving line on stderr")
		}
		go io.Copy(io.Discard, stderr)
		resp, err := http.Get("http://" + addr + "/v1/status")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status: %d", resp.StatusCode)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("exit after SIGTERM: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("sluiced did not exit 20 s after SIGTERM")
		}
	})
}

// The in-memory engine is for tests: a release build must not contain it.
func TestReleaseBuildHasNoFake(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "/internal/engine/enginetest") {
		t.Fatal("sluiced links internal/engine/enginetest without -tags sluicefake")
	}
	out, err = exec.Command("go", "list", "-deps", "-tags", "sluicefake", ".").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "/internal/engine/enginetest") {
		t.Fatalf("the sluicefake build lacks the fake: %v", err)
	}
}
