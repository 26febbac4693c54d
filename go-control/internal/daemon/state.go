// Package daemon is sluiced: it owns the config file, the control store, the
// admin API and metrics, and drives the engine through engine.Engine.
package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/store"
)

// Store keys. Names are base64url-encoded so any name fits a NATS KV key.
const (
	keyRoutes      = "routes"
	keyTenants     = "tenants"
	prefixModel    = "model."
	prefixAlias    = "alias."
	prefixPeer     = "peer."
	prefixPeerGone = "peergone." // a file-defined peer removed through the API
	// A model version unloaded through the API: kept out of the effective
	// config (file or store) until it is loaded again.
	prefixModelGone = "modelgone."
)

func enc(parts ...string) string {
	var b bytes.Buffer
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(p)
	}
	return base64.RawURLEncoding.EncodeToString(b.Bytes())
}

// modelRef names a model version (the value of a prefixModelGone key).
type modelRef struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

type aliasRec struct {
	Model   string `json:"model"`
	Alias   string `json:"alias"`
	Version string `json:"version"`
}

// overrides is the control state made through the API, as kept in the store.
type overrides struct {
	routes    []config.Route // nil: the file's routes
	tenants   []config.Tenant
	models    []config.Model
	aliases   []aliasRec
	peers     []config.Peer
	peerGone  map[string]bool
	modelGone map[[2]string]bool // (name, version)
}

// state is the daemon's view: the last good file, the overrides, and the
// effective config the engine runs.
type state struct {
	mu        sync.Mutex
	link      FleetLink  // fleet mode: changes go to the shared store first (fleetwrite.go)
	writeMu   sync.Mutex // fleet mode: one change at a time from this appliance
	path      string
	log       *slog.Logger
	eng       engine.Engine
	st        store.Store
	file      *config.Config
	eff       *config.Config
	started   time.Time
	reloadsOK uint64
	reloadsKO uint64
	lastOK    time.Time
	xf        map[string]servedTransform // store key -> the transform the engine serves for it (transforms.go)
	eps       map[epKey]bool             // backend endpoints the engine serves -> draining (endpoints.go)
}

func loadOverrides(s store.Store) (*overrides, error) {
	o := &overrides{peerGone: map[string]bool{}, modelGone: map[[2]string]bool{}}
	get := func(key string, v any) error {
		b, err := s.Get(key)
		if errors.Is(err, errs.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, v); err != nil {
			return fmt.Errorf("%w: store key %s: %w", errs.ErrInternal, key, err)
		}
		return nil
	}
	if err := get(keyRoutes, &o.routes); err != nil {
		return nil, err
	}
	if err := get(keyTenants, &o.tenants); err != nil {
		return nil, err
	}
	list := func(prefix string, each func([]byte) error) error {
		es, err := s.List(prefix)
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := each(e.Value); err != nil {
				return fmt.Errorf("%w: store key %s: %w", errs.ErrInternal, e.Key, err)
			}
		}
		return nil
	}
	err := errors.Join(
		list(prefixModel, func(b []byte) error {
			var m config.Model
			err := json.Unmarshal(b, &m)
			o.models = append(o.models, m)
			return err
		}),
		list(prefixAlias, func(b []byte) error {
			var a aliasRec
			err := json.Unmarshal(b, &a)
			o.aliases = append(o.aliases, a)
			return err
		}),
		list(prefixPeer, func(b []byte) error {
			var p config.Peer
			err := json.Unmarshal(b, &p)
			o.peers = append(o.peers, p)
			return err
		}),
		list(prefixPeerGone, func(b []byte) error {
			o.peerGone[string(b)] = true
			return nil
		}),
		list(prefixModelGone, func(b []byte) error {
			var m modelRef
			err := json.Unmarshal(b, &m)
			o.modelGone[[2]string{m.Name, m.Version}] = true
			return err
		}),
	)
	return o, err
}

// compose builds the effective config: the file with the API's overrides.
func compose(file *config.Config, o *overrides) *config.Config {
	eff := file.Clone()
	if o.routes != nil {
		eff.Routes = slices.Clone(o.routes)
	}
	if o.tenants != nil {
		eff.Tenants = slices.Clone(o.tenants)
	}
	for _, m := range o.models {
		dup := slices.ContainsFunc(eff.Models, func(x config.Model) bool { return x.Name == m.Name && x.Version == m.Version })
		if !dup {
			eff.Models = append(eff.Models, m)
		}
	}
	eff.Models = slices.DeleteFunc(eff.Models, func(m config.Model) bool { return o.modelGone[[2]string{m.Name, m.Version}] })
	for _, a := range o.aliases {
		moveAlias(eff, a.Model, a.Alias, a.Version)
	}
	eff.Peers = slices.DeleteFunc(eff.Peers, func(p config.Peer) bool {
		return o.peerGone[p.Name] || slices.ContainsFunc(o.peers, func(q config.Peer) bool { return q.Name == p.Name })
	})
	eff.Peers = append(eff.Peers, o.peers...)
	return eff
}

// moveAlias points alias at version in cfg; it is a no-op when the version
// is not there (the file dropped it), leaving the file's aliases alone.
func moveAlias(cfg *config.Config, model, alias, version string) {
	if !slices.ContainsFunc(cfg.Models, func(m config.Model) bool { return m.Name == model && m.Version == version }) {
		return
	}
	for i := range cfg.Models {
		m := &cfg.Models[i]
		if m.Name != model {
			continue
		}
		m.Aliases = slices.DeleteFunc(m.Aliases, func(a string) bool { return a == alias })
		if m.Version == version {
			m.Aliases = append(m.Aliases, alias)
		}
	}
}

func validate(cfg *config.Config) error {
	issues := config.Validate(cfg)
	if len(issues) == 0 {
		return nil
	}
	var b bytes.Buffer
	for i, is := range issues {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(is.Error())
	}
	return fmt.Errorf("%w: %s", errs.ErrInvalidConfig, b.String())
}

func sectionDoc(cfg *config.Config, s engine.Section) ([]byte, error) {
	var v any
	switch s {
	case engine.SectionRoutes:
		v = nonNil(cfg.Routes)
	case engine.SectionShards:
		v = nonNil(cfg.Shards)
	case engine.SectionTenants:
		v = nonNil(cfg.Tenants)
	case engine.SectionModels:
		v = nonNil(cfg.Models)
	case engine.SectionPeers:
		v = nonNil(cfg.Peers)
	default:
		return nil, fmt.Errorf("%w: section %q is not kept in the config", errs.ErrInvalidArgument, s)
	}
	return json.Marshal(v)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// staticSections are the parts that need a restart to change.
func staticSections(a, b *config.Config) []string {
	var out []string
	eq := func(x, y any) bool {
		bx, _ := json.Marshal(x)
		by, _ := json.Marshal(y)
		return bytes.Equal(bx, by)
	}
	if !eq(a.Engine, b.Engine) {
		out = append(out, "engine")
	}
	if !eq(a.IOUring, b.IOUring) {
		out = append(out, "io_uring")
	}
	if !eq(a.Host, b.Host) {
		out = append(out, "host")
	}
	if !eq(a.ONNXRuntime, b.ONNXRuntime) {
		out = append(out, "onnxruntime")
	}
	if !eq(a.Control, b.Control) || a.Control.AdminToken != b.Control.AdminToken {
		out = append(out, "control")
	}
	if !eq(a.Fleet, b.Fleet) {
		out = append(out, "fleet")
	}
	if !eq(a.Auth, b.Auth) {
		out = append(out, "auth")
	}
	if !eq(a.Jobs, b.Jobs) {
		out = append(out, "jobs")
	}
	// The engine reads [[backends]] and [openai] at start: no live section
	// carries them (the endpoints of its pools change through the admin
	// API: endpoints.go).
	if !eq(a.Backends, b.Backends) {
		out = append(out, "backends")
	}
	if !eq(a.OpenAI, b.OpenAI) {
		out = append(out, "openai")
	}
	return out
}

// reload re-reads the file and applies the live sections that changed.
func (s *state) reload() (api.ReloadResult, error) { return s.reloadFrom(s.st) }

// reloadFrom is reload with the overrides read from st (the fleet passes
// one consistent view of its buckets).
func (s *state) reloadFrom(st store.Store) (api.ReloadResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res, err := s.reloadLocked(st)
	if err != nil {
		s.reloadsKO++
		s.log.Error("reload refused; the running config stays", "err", err)
		return res, err
	}
	s.reloadsOK++
	s.lastOK = time.Now()
	s.log.Info("reloaded", "applied", res.Applied, "restart_required", res.RestartRequired)
	return res, nil
}

func (s *state) reloadLocked(st store.Store) (api.ReloadResult, error) {
	res := api.ReloadResult{Applied: []string{}, RestartRequired: []string{}}
	file, err := config.Load(s.path)
	if err != nil {
		return res, fmt.Errorf("%w: %w", errs.ErrInvalidConfig, err)
	}
	o, err := loadOverrides(st)
	if err != nil {
		return res, err
	}
	next := compose(file, o)
	res.RestartRequired = append(res.RestartRequired, staticSections(s.eff, next)...)
	// Static sections keep their running values until a restart.
	keepStatic(next, s.eff)
	if err := validate(next); err != nil {
		return res, fmt.Errorf("%w (with the overrides made through the API)", err)
	}
	var changes []engine.Change
	for _, sec := range engine.Sections {
		if sec == engine.SectionSchemas {
			continue
		}
		a, err := sectionDoc(s.eff, sec)
		if err != nil {
			return res, err
		}
		b, err := sectionDoc(next, sec)
		if err != nil {
			return res, err
		}
		if !bytes.Equal(a, b) {
			changes = append(changes, engine.Change{Section: sec, Doc: b})
			res.Applied = append(res.Applied, string(sec))
		}
	}
	if len(changes) > 0 {
		if err := s.eng.Apply(changes...); err != nil {
			return api.ReloadResult{Applied: []string{}, RestartRequired: res.RestartRequired}, err
		}
	}
	s.file = file
	s.eff = next
	if s.syncTransformsLocked(st) {
		res.Applied = append(res.Applied, "transforms")
	}
	if s.syncEndpointsLocked(st) {
		res.Applied = append(res.Applied, "endpoints")
	}
	return res, nil
}

// keepStatic gives next the running values of the sections only a
// restart changes.
func keepStatic(next, running *config.Config) {
	next.Engine, next.IOUring, next.Host, next.ONNXRuntime, next.Control, next.Fleet, next.Jobs, next.Auth =
		running.Engine, running.IOUring, running.Host, running.ONNXRuntime, running.Control, running.Fleet, running.Jobs, running.Auth
	next.Backends, next.OpenAI = running.Backends, running.OpenAI
}

// applySection validates cfg with one section changed, applies it, and on
// success runs persist; if persisting fails the engine is set back.
func (s *state) applySection(next *config.Config, sec engine.Section, persist func() error) error {
	if err := validate(next); err != nil {
		return err
	}
	doc, err := sectionDoc(next, sec)
	if err != nil {
		return err
	}
	if err := s.eng.Apply(engine.Change{Section: sec, Doc: doc}); err != nil {
		return err
	}
	if err := persist(); err != nil {
		if old, e2 := sectionDoc(s.eff, sec); e2 == nil {
			if e3 := s.eng.Apply(engine.Change{Section: sec, Doc: old}); e3 != nil {
				s.log.Error("could not set the engine back after a store failure", "section", sec, "err", e3)
			}
		}
		return fmt.Errorf("not saved, so not applied: %w", err)
	}
	s.eff = next
	return nil
}

func (s *state) putJSON(key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: %w", errs.ErrInternal, err)
	}
	return s.st.Put(key, b)
}

func (s *state) setRoutes(ctx context.Context, routes []config.Route) error {
	if s.link != nil {
		return s.fleetSetRoutes(ctx, routes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.eff.Clone()
	next.Routes = nonNil(routes)
	return s.applySection(next, engine.SectionRoutes, func() error { return s.putJSON(keyRoutes, next.Routes) })
}

// resetRoutes drops the API's route override and goes back to the file.
func (s *state) resetRoutes(ctx context.Context) error {
	if s.link != nil {
		return s.fleetResetRoutes(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.eff.Clone()
	next.Routes = s.file.Clone().Routes
	return s.applySection(next, engine.SectionRoutes, func() error { return s.st.Delete(keyRoutes) })
}

// setTenants replaces the tenant set; an entry without a key keeps the key
// of the running tenant of the same name.
func (s *state) setTenants(ctx context.Context, ts []config.Tenant) error {
	if s.link != nil {
		return s.fleetSetTenants(ctx, ts)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.eff.Clone()
	for i := range ts {
		keepCredentials(&ts[i], s.eff.Tenants)
		if ts[i].Key == "" {
			return fmt.Errorf("%w: tenants[%d].key: is required for new tenant %q", errs.ErrInvalidConfig, i, ts[i].Name)
		}
	}
	next.Tenants = nonNil(ts)
	return s.applySection(next, engine.SectionTenants, func() error { return s.putJSON(keyTenants, next.Tenants) })
}

func (s *state) loadModel(ctx context.Context, m config.Model) error {
	if s.link != nil {
		return s.fleetLoadModel(ctx, m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.ContainsFunc(s.eff.Models, func(x config.Model) bool { return x.Name == m.Name && x.Version == m.Version }) {
		return fmt.Errorf("%w: model %s version %s is loaded", errs.ErrAlreadyExists, m.Name, m.Version)
	}
	next := s.eff.Clone()
	next.Models = append(next.Models, m)
	if err := validate(next); err != nil {
		return err
	}
	if err := s.eng.LoadModel(m); err != nil {
		return err
	}
	// The engine has it now, whatever the store says.
	s.eff = next
	err := errors.Join(s.putJSON(prefixModel+enc(m.Name, m.Version), m), s.st.Delete(prefixModelGone+enc(m.Name, m.Version)))
	if err != nil {
		s.log.Error("model loaded but not saved: it will be gone after a restart", "model", m.Name, "version", m.Version, "err", err)
		return fmt.Errorf("loaded but not saved: %w", err)
	}
	return nil
}

// unloadModel removes a loaded version from every core; it stays out of the
// effective config on reloads and restarts until it is loaded again. Its
// aliases go with it: requests naming them get unknown_model.
func (s *state) unloadModel(ctx context.Context, name, version string) error {
	if s.link != nil {
		return s.fleetUnloadModel(ctx, name, version)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.eff.Models, func(x config.Model) bool { return x.Name == name && x.Version == version })
	if i < 0 {
		return fmt.Errorf("%w: model %s version %s is not loaded", errs.ErrNotFound, name, version)
	}
	next := s.eff.Clone()
	next.Models = slices.Delete(next.Models, i, i+1)
	inFile := slices.ContainsFunc(s.file.Models, func(x config.Model) bool { return x.Name == name && x.Version == version })
	return s.applySection(next, engine.SectionModels, func() error {
		err := s.st.Delete(prefixModel + enc(name, version))
		if err == nil && inFile {
			err = s.putJSON(prefixModelGone+enc(name, version), modelRef{name, version})
		}
		return err
	})
}

func (s *state) setAlias(ctx context.Context, model, alias, version string) error {
	if s.link != nil {
		return s.fleetSetAlias(ctx, model, alias, version)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.ContainsFunc(s.eff.Models, func(x config.Model) bool { return x.Name == model && x.Version == version }) {
		return fmt.Errorf("%w: model %s version %s is not loaded", errs.ErrNotFound, model, version)
	}
	next := s.eff.Clone()
	moveAlias(next, model, alias, version)
	if err := validate(next); err != nil {
		return err
	}
	if err := s.eng.SetAlias(model, alias, version); err != nil {
		return err
	}
	if err := s.putJSON(prefixAlias+enc(model, alias), aliasRec{model, alias, version}); err != nil {
		// Re-applying the running models section puts every alias back,
		// including removing one that did not exist before.
		doc, e2 := sectionDoc(s.eff, engine.SectionModels)
		if e2 == nil {
			e2 = s.eng.Apply(engine.Change{Section: engine.SectionModels, Doc: doc})
		}
		if e2 != nil {
			s.log.Error("could not set the alias back after a store failure", "err", e2)
		}
		return fmt.Errorf("not saved, so not applied: %w", err)
	}
	s.eff = next
	return nil
}

func (s *state) addPeer(ctx context.Context, p config.Peer) error {
	if s.link != nil {
		return s.fleetAddPeer(ctx, p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.ContainsFunc(s.eff.Peers, func(x config.Peer) bool { return x.Name == p.Name }) {
		return fmt.Errorf("%w: peer %q", errs.ErrAlreadyExists, p.Name)
	}
	next := s.eff.Clone()
	next.Peers = append(next.Peers, p)
	if err := validate(next); err != nil {
		return err
	}
	if err := s.eng.AddPeer(p); err != nil {
		return err
	}
	err := errors.Join(s.putJSON(prefixPeer+enc(p.Name), p), s.st.Delete(prefixPeerGone+enc(p.Name)))
	if err != nil {
		if e2 := s.eng.RemovePeer(p.Name); e2 != nil {
			s.log.Error("could not remove the peer after a store failure", "err", e2)
		}
		return fmt.Errorf("not saved, so not applied: %w", err)
	}
	s.eff = next
	return nil
}

func (s *state) removePeer(ctx context.Context, name string) error {
	if s.link != nil {
		return s.fleetRemovePeer(ctx, name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.eff.Peers, func(x config.Peer) bool { return x.Name == name })
	if i < 0 {
		return fmt.Errorf("%w: peer %q", errs.ErrNotFound, name)
	}
	p := s.eff.Peers[i]
	if err := s.eng.RemovePeer(name); err != nil {
		return err
	}
	inFile := slices.ContainsFunc(s.file.Peers, func(x config.Peer) bool { return x.Name == name })
	err := s.st.Delete(prefixPeer + enc(name))
	if err == nil && inFile {
		err = s.st.Put(prefixPeerGone+enc(name), []byte(name))
	}
	if err != nil {
		if e2 := s.eng.AddPeer(p); e2 != nil {
			s.log.Error("could not restore the peer after a store failure", "err", e2)
		}
		return fmt.Errorf("not saved, so not applied: %w", err)
	}
	next := s.eff.Clone()
	next.Peers = slices.Delete(next.Peers, i, i+1)
	s.eff = next
	return nil
}

// snapshot returns a copy of the effective config.
func (s *state) snapshot() *config.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eff.Clone()
}

// keepCredentials fills what a PUT /v1/tenants entry leaves out from the
// running tenant of the same name: its key (never returned, so clients
// cannot send it back) and, when "tokens" is absent (not an empty list),
// its front-door bearer tokens.
func keepCredentials(t *config.Tenant, running []config.Tenant) {
	for _, old := range running {
		if old.Name != t.Name {
			continue
		}
		if t.Key == "" {
			t.Key = old.Key
		}
		if t.Tokens == nil {
			t.Tokens = old.Tokens
		}
	}
}
