package jobs

import (
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/config"
)

func TestSubjectToken(t *testing.T) {
	if got := config.RenderSubject(config.JobResultsDefault, subjectToken("a.b*>"), "s"); got != "inference.results.a_b__" {
		t.Fatal(got)
	}
	if err := config.CheckSubject(config.RenderSubject(config.JobDeadLettersDefault, subjectToken(""), "s"), false); err != nil {
		t.Fatal(err)
	}
}
