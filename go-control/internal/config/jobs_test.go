package config

import (
	"strings"
	"testing"
)

const jobsBase = "[engine]\nworkers = [0]\n[fleet]\nservers = [\"nats://127.0.0.1:4222\"]\n"

func TestJobsDefaults(t *testing.T) {
	cfg, err := Parse("t.toml", []byte(jobsBase+"[[jobs.streams]]\nstream = \"ai-inference\"\nsubjects = [\"inference.*\"]\ntenant = \"demo\"\nmodels = { llm = \"mlp\" }\n"))
	if err != nil {
		t.Fatal(err)
	}
	j := cfg.Jobs
	if j.Concurrency != JobsConcurrencyDefault || j.FetchWaitMs != JobsFetchWaitMsDefault || j.BusyRetries != JobsBusyRetriesDefault {
		t.Fatalf("jobs defaults: %+v", j)
	}
	s := j.Streams[0]
	if !s.Create || s.Storage != "file" || s.Consumer != "sluice" || s.MaxAckPending != 256 || s.InflightMax != 256 ||
		s.MaxDeliver != 5 || s.FetchMax != 32 || s.Replicas != 1 || s.DuplicateWindowMs != 120_000 ||
		s.Results != JobResultsDefault || s.DeadLetters != JobDeadLettersDefault || s.Models["llm"] != "mlp" {
		t.Fatalf("stream defaults: %+v", s)
	}
	if len(s.FilterSubjects) != 1 || s.FilterSubjects[0] != "inference.*" {
		t.Fatalf("filter subjects default to the subjects: %v", s.FilterSubjects)
	}
	// A written inflight_max stays; the engine's JSON keeps the table opaque
	// but present, and Clone keeps it.
	if c := cfg.Clone(); c.Jobs.Streams[0].Models["llm"] != "mlp" || c.Jobs.Streams[0].InflightMax != 256 {
		t.Fatalf("clone: %+v", c.Jobs)
	}
	js, _ := cfg.JSON()
	if !strings.Contains(string(js), `"jobs":{"concurrency":64`) || !strings.Contains(string(js), `"models":{"llm":"mlp"}}]}`) {
		t.Fatalf("engine JSON: %s", js)
	}
}

func TestJobsErrorsNameFileLineAndKey(t *testing.T) {
	stream := "[[jobs.streams]]\nstream = \"s\"\nsubjects = [\"inference.*\"]\ntenant = \"demo\"\n"
	cases := []struct{ name, src, want string }{
		{"no servers", "[engine]\nworkers = [0]\n" + stream, "t.toml:3: jobs.streams[0]: needs fleet.servers"},
		{"results under the filter", jobsBase + "[[jobs.streams]]\nstream = \"s\"\nsubjects = [\"inference.>\"]\ntenant = \"demo\"\n",
			`t.toml:5: jobs.streams[0].results: "inference.results.{model}" falls under filter subject "inference.>"`},
		{"bad stream name", jobsBase + "[[jobs.streams]]\nstream = \"a.b\"\nsubjects = [\"x.*\"]\ntenant = \"demo\"\n", `t.toml:6: jobs.streams[0].stream: "a.b" must not hold`},
		{"no tenant", jobsBase + "[[jobs.streams]]\nstream = \"s\"\nsubjects = [\"x.*\"]\n", "t.toml:5: jobs.streams[0].tenant: is required"},
		{"bad subject", jobsBase + "[[jobs.streams]]\nstream = \"s\"\nsubjects = [\"x.>.y\"]\ntenant = \"demo\"\n", `t.toml:7: jobs.streams[0].subjects[0]: subject "x.>.y": > must be the last token`},
		{"bad template", jobsBase + stream + "results = \"r.{tenant}\"\n", `t.toml:9: jobs.streams[0].results: template "r.{tenant}": only {model} and {stream}`},
		{"wildcard template", jobsBase + stream + "dead_letters = \"dlq.*\"\n", `t.toml:9: jobs.streams[0].dead_letters: template "dlq.*": subject "dlq.*": wildcards are not allowed here`},
		{"ack wait too short", jobsBase + stream + "ack_wait_ms = 5000\n", "t.toml:9: jobs.streams[0].ack_wait_ms: 5000 must exceed jobs.request_timeout_ms + 2 × jobs.publish_timeout_ms (20000)"},
		{"inflight over max_ack_pending", jobsBase + stream + "max_ack_pending = 8\ninflight_max = 9\n", "t.toml:10: jobs.streams[0].inflight_max: 9 is out of range 1..=8"},
		{"max_deliver zero", jobsBase + stream + "max_deliver = 0\n", "t.toml:9: jobs.streams[0].max_deliver: 0 is neither -1"},
		{"fetch_max", jobsBase + stream + "fetch_max = 1000\n", "t.toml:9: jobs.streams[0].fetch_max: 1000 is out of range 1..=256"},
		{"storage", jobsBase + stream + "storage = \"disk\"\n", `t.toml:9: jobs.streams[0].storage: "disk" is not one of "file", "memory"`},
		{"model token", jobsBase + stream + "models = { \"a b\" = \"mlp\" }\n", `t.toml:9: jobs.streams[0].models.a b: "a b" is not one subject token`},
		{"fetch wait", jobsBase + "[jobs]\nfetch_wait_ms = 1\n" + stream, "t.toml:6: jobs.fetch_wait_ms: 1 is out of range 10..=60000"},
		{"dpdk needs an address", "[engine]\nworkers = [0]\ntransport = \"dpdk\"\n[fleet]\nservers = [\"nats://h:1\"]\n[jobs]\nconcurrency = 4\n" + stream, "t.toml:6: jobs.data_address: is required with engine.transport \"dpdk\""},
		{"twice", jobsBase + stream + stream, `t.toml:9: jobs.streams[1].consumer: stream "s" consumer "sluice" listed twice`},
		{"unknown key", jobsBase + stream + "batch = 3\n", "t.toml:9: jobs.streams.batch: unknown key"},
		{"reply prefix under $KV", jobsBase + stream + "reply_prefixes = { demo = [\"$KV.sluice\"] }\n",
			`t.toml:9: jobs.streams[0].reply_prefixes.demo[0]: subject "$KV.sluice": $-subjects are NATS APIs`},
		{"reply prefix under $JS", jobsBase + stream + "[jobs.streams.reply_prefixes]\ndemo = [\"ok.demo\", \"$JS.API\"]\n",
			`t.toml:10: jobs.streams[0].reply_prefixes.demo[1]: subject "$JS.API": $-subjects`},
		{"reply prefix wildcard", jobsBase + stream + "reply_prefixes = { demo = [\"replies.>\"] }\n",
			`jobs.streams[0].reply_prefixes.demo[0]: subject "replies.>": wildcards are not allowed here (a prefix is literal tokens`},
		{"reply prefix of a stranger", jobsBase + stream + "reply_prefixes = { eve = [\"replies.eve\"] }\n",
			`t.toml:9: jobs.streams[0].reply_prefixes.eve: tenant "eve" is neither the stream's tenant nor one of its tenants`},
		{"reply prefix under the filter", jobsBase + stream + "reply_prefixes = { demo = [\"inference\"] }\n",
			`t.toml:9: jobs.streams[0].reply_prefixes.demo[0]: "inference" falls under filter subject "inference.*"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := parseErr(t, tc.src)
			if !strings.Contains(got, tc.want) {
				t.Fatalf("error\n  %s\nwant it to contain\n  %s", got, tc.want)
			}
		})
	}
}

func TestReplyPrefixes(t *testing.T) {
	src := jobsBase + "[[jobs.streams]]\nstream = \"s\"\nsubjects = [\"inference.*\"]\ntenant = \"demo\"\ntenants = [\"other\"]\n" +
		"reply_prefixes = { demo = [\"replies.demo\"], other = [\"replies.other\", \"x\"] }\n"
	cfg, err := Parse("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Clone().Jobs.Streams[0].ReplyPrefixes; len(got["demo"]) != 1 || len(got["other"]) != 2 {
		t.Fatalf("reply_prefixes %v", got)
	}
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"replies.demo", "replies.demo", true},
		{"replies.demo", "replies.demo.c7", true},
		{"replies.demo", "replies.demonic", false},
		{"replies.demo", "replies", false},
		{"replies.demo", "other.replies.demo", false},
	} {
		if got := SubjectUnder(c.p, c.s); got != c.want {
			t.Errorf("%s under %s = %v", c.s, c.p, got)
		}
	}
	for _, s := range []string{"$KV.sluice.x", "$JS.API.STREAM.DELETE.s", "$SYS.REQ.SERVER.PING", "$G", "a.*", "a.>"} {
		if CheckReplySubject(s) == nil {
			t.Errorf("%s taken for a reply subject", s)
		}
	}
	if err := CheckReplySubject("replies.demo.c7"); err != nil {
		t.Error(err)
	}
}

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		f, s string
		want bool
	}{
		{"inference.>", "inference.results.mlp", true},
		{"inference.*", "inference.results.mlp", false},
		{"inference.*", "inference.llm", true},
		{"inference.>", "inference", false},
		{"a.*.c", "a.b.c", true},
		{"a.b", "a.b", true},
		{"a.b", "a.b.c", false},
	} {
		if got := SubjectMatches(c.f, c.s); got != c.want {
			t.Errorf("%s ~ %s = %v", c.f, c.s, got)
		}
	}
}
