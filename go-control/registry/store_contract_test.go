package registry_test

import (
	"testing"

	"github.com/sluice-ai/sluice/go-control/registry"
	"github.com/sluice-ai/sluice/go-control/registry/storetest"
)

func TestMemoryStoreContract(t *testing.T) {
	storetest.Contract(t, registry.NewMemoryStore())
}

func TestBoltStoreContract(t *testing.T) {
	s, err := registry.OpenBoltStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	storetest.Contract(t, s)
}
