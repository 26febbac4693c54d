package registry

// Compatibility levels (global and per subject) and checks against them.

import (
	"context"
	"fmt"

	"github.com/sluice-ai/sluice/go-control/registry/compat"
)

func (r *Registry) levelFor(subject string) compat.Level {
	if sub := r.subjects[subject]; sub != nil && sub.level != "" {
		return sub.level
	}
	if r.global != "" {
		return r.global
	}
	return r.defaultLevel
}

// CheckCompatibility tests in against one version of subject (version >= 1
// or Latest) or, with allVersions, against the versions the subject's level
// requires. The result carries the Confluent-style messages and the
// differences they come from; no messages means compatible.
func (r *Registry) CheckCompatibility(subject string, version int, allVersions bool, in SchemaInput) (compat.Result, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	parsed, _, err := r.prepare(in)
	if err != nil {
		return compat.Result{}, err
	}
	level := r.levelFor(subject)
	sub := r.subjects[subject]
	var prev []compat.Version
	if allVersions {
		if sub != nil {
			if prev, err = r.previous(sub); err != nil {
				return compat.Result{}, err
			}
		}
	} else {
		v, err := r.lookupVersion(subject, version, false)
		if err != nil {
			return compat.Result{}, err
		}
		rec := r.schemas[v.id]
		if rec == nil || rec.parsed == nil {
			return compat.Result{}, errStore(fmt.Errorf("schema %d cannot be parsed", v.id))
		}
		prev = []compat.Version{{Version: v.version, Schema: rec.parsed, Text: rec.Schema}}
	}
	return compat.Check(level, parsed, prev), nil
}

// Compatibility returns the level set for subject ("" = global). ok is
// false when subject has no level of its own.
func (r *Registry) Compatibility(subject string) (level compat.Level, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if subject == "" {
		if r.global != "" {
			return r.global, true
		}
		return r.defaultLevel, true
	}
	if sub := r.subjects[subject]; sub != nil && sub.level != "" {
		return sub.level, true
	}
	return r.levelFor(subject), false
}

// SetCompatibility sets the level of subject ("" = global).
func (r *Registry) SetCompatibility(ctx context.Context, subject string, level compat.Level) error {
	if _, ok := compat.ParseLevel(string(level)); !ok {
		return errInvalidLevel()
	}
	return r.write(ctx, func(*[]Change) error { return r.setCompatibility(ctx, subject, level) })
}

func (r *Registry) setCompatibility(ctx context.Context, subject string, level compat.Level) error {
	if subject == "" {
		rev, err := r.putJSON(ctx, keyConfigGlobal, configVal{Compatibility: level}, r.globalRev)
		if err != nil {
			return storeErr(err)
		}
		r.global, r.globalRev = level, rev
		return nil
	}
	if e := validSubject(subject); e != nil {
		return e
	}
	sub := r.subject(subject, true)
	rev, err := r.putJSON(ctx, keyConfigSubject+subjectKey(subject), configVal{Compatibility: level}, sub.levelRev)
	if err != nil {
		return storeErr(err)
	}
	sub.level, sub.levelRev = level, rev
	return nil
}

// DeleteCompatibility removes subject's own level (or resets the global
// one to the default) and returns the level it had.
func (r *Registry) DeleteCompatibility(ctx context.Context, subject string) (prev compat.Level, err error) {
	err = r.write(ctx, func(*[]Change) error {
		var err error
		prev, err = r.deleteCompatibility(ctx, subject)
		return err
	})
	return prev, err
}

func (r *Registry) deleteCompatibility(ctx context.Context, subject string) (compat.Level, error) {
	if subject == "" {
		prev := r.global
		if prev == "" {
			prev = r.defaultLevel
		}
		if r.globalRev != 0 {
			if err := r.store.Delete(ctx, keyConfigGlobal, r.globalRev); err != nil {
				return "", storeErr(err)
			}
		}
		r.global, r.globalRev = "", 0
		return prev, nil
	}
	sub := r.subjects[subject]
	if sub == nil || sub.level == "" {
		return "", errSubjectConfigNotSet(subject)
	}
	if err := r.store.Delete(ctx, keyConfigSubject+subjectKey(subject), sub.levelRev); err != nil {
		return "", storeErr(err)
	}
	prev := sub.level
	sub.level, sub.levelRev = "", 0
	if len(sub.versions) == 0 {
		delete(r.subjects, subject)
	}
	return prev, nil
}
