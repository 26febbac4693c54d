package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/registry"
)

// RegistryPrefix is where the Confluent-compatible schema registry is
// served: clients use http://ADMIN_ADDR/registry as their registry URL.
const RegistryPrefix = "/registry"

// SchemaRetryInterval spaces retries of a schema push the engine refused
// for a passing reason (busy).
const SchemaRetryInterval = time.Second

// pushedSchema is a schema version as the engine's SchemaCfg takes it: the
// engine resolves references against the same pushed set, so the data plane
// can compile schemas that import others.
type pushedSchema struct {
	engine.Schema
	References []registry.Reference `json:"references,omitempty"`
}

// schemaSync keeps the engine's hot-path schema set equal to the registry's
// versions (retired ones marked). The registry calls note on its writer goroutine; pushes
// happen on our own goroutine so a slow engine never stalls a registration.
type schemaSync struct {
	mu      sync.Mutex
	live    map[[2]any]pushedSchema // (subject, version) -> schema
	dirty   chan struct{}
	pushed  int // successful pushes, for tests and status
	lastErr error
	// noted counts changes heard; pushedGen is the noted count the last
	// successful push included.
	noted, pushedGen uint64
}

func newSchemaSync() *schemaSync {
	return &schemaSync{live: map[[2]any]pushedSchema{}, dirty: make(chan struct{}, 1)}
}

func (s *schemaSync) note(c registry.Change) {
	s.mu.Lock()
	k := [2]any{c.Subject, c.Version}
	if c.Kind == registry.ChangeDeleted {
		delete(s.live, k)
	} else {
		// Retired (soft-deleted) versions stay, marked, so the engine can
		// answer unknown_schema for them.
		s.live[k] = pushedSchema{Schema: engine.Schema{ID: c.SchemaID, Subject: c.Subject, Version: c.Version,
			SchemaType: string(c.Type), Schema: c.Schema, Retired: c.Retired}, References: c.References}
	}
	s.noted++
	s.mu.Unlock()
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// waitPushed waits (at most timeout) until every change heard so far has
// reached the engine, and reports whether it did.
func (s *schemaSync) waitPushed(timeout time.Duration) bool {
	s.mu.Lock()
	want := s.noted
	s.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		done := s.pushedGen >= want
		s.mu.Unlock()
		if done {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// doc returns the set to push and the noted count it includes.
func (s *schemaSync) doc() ([]byte, uint64, error) {
	s.mu.Lock()
	gen := s.noted
	list := make([]pushedSchema, 0, len(s.live))
	for _, v := range s.live {
		list = append(list, v)
	}
	s.mu.Unlock()
	sort.Slice(list, func(i, j int) bool {
		if list[i].Subject != list[j].Subject {
			return list[i].Subject < list[j].Subject
		}
		return list[i].Version < list[j].Version
	})
	b, err := json.Marshal(list)
	return b, gen, err
}

// run pushes the set whenever it changes, until ctx ends.
func (s *schemaSync) run(ctx context.Context, d *Daemon) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.dirty:
		case <-retry.C:
		}
		doc, gen, err := s.doc()
		if err == nil {
			err = d.eng.Apply(engine.Change{Section: engine.SectionSchemas, Doc: doc})
		}
		s.mu.Lock()
		s.lastErr = err
		if err == nil {
			s.pushed++
			s.pushedGen = max(s.pushedGen, gen)
		}
		s.mu.Unlock()
		if err != nil {
			d.state.log.Error("schema push to the engine failed; retrying", "err", err)
			retry.Reset(SchemaRetryInterval)
		}
	}
}

// openRegistry opens the registry on st, or in the data dir when st is nil,
// and returns its handler.
func openRegistry(dataDir string, st registry.Store) (*registry.Registry, http.Handler, error) {
	if st == nil {
		var err error
		if st, err = registry.OpenBoltStore(dataDir); err != nil {
			return nil, nil, err
		}
	}
	reg, err := registry.Open(context.Background(), st, registry.Options{})
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("schema registry: %w", err)
	}
	return reg, http.StripPrefix(RegistryPrefix, registry.NewHandler(reg)), nil
}
