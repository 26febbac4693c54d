package daemon

import (
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/config"
)

func TestPutTenantsKeepsKeyAndTokensLeftOut(t *testing.T) {
	running := []config.Tenant{{Name: "a", Key: "hex:00", Tokens: []string{"sha256:aa"}}}
	omitted := config.Tenant{Name: "a"}
	keepCredentials(&omitted, running)
	if omitted.Key != "hex:00" || len(omitted.Tokens) != 1 {
		t.Fatalf("left out: %+v", omitted)
	}
	cleared := config.Tenant{Name: "a", Tokens: []string{}}
	keepCredentials(&cleared, running)
	if cleared.Key != "hex:00" || len(cleared.Tokens) != 0 {
		t.Fatalf("[] removes the tokens: %+v", cleared)
	}
	other := config.Tenant{Name: "b"}
	keepCredentials(&other, running)
	if other.Key != "" || other.Tokens != nil {
		t.Fatalf("another tenant takes nothing: %+v", other)
	}
}
