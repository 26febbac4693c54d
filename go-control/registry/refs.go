package registry

// References between schemas: resolving them into parser dependencies
// and finding who references a version.

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/sluice-ai/sluice/go-control/registry/compat"
)

// resolveRefs turns references into parser dependencies, dependencies of
// dependencies first. Caller holds mu.
func (r *Registry) resolveRefs(refs []Reference, depth int, visiting map[string]bool) ([]compat.Dependency, error) {
	if len(refs) > ReferencesMax {
		return nil, fmt.Errorf("%d references, more than the limit of %d", len(refs), ReferencesMax)
	}
	if depth > referenceDepthMax {
		return nil, fmt.Errorf("references nested deeper than %d", referenceDepthMax)
	}
	var deps []compat.Dependency
	seen := map[string]bool{}
	for _, ref := range refs {
		if ref.Name == "" {
			return nil, errors.New("reference without a name")
		}
		v, err := r.refVersion(ref)
		if err != nil {
			return nil, err
		}
		rec := r.schemas[v.id]
		if rec == nil {
			return nil, fmt.Errorf("reference %q: schema %d missing", ref.Name, v.id)
		}
		k := fmt.Sprintf("%s\x00%d", ref.Subject, v.version)
		if visiting[k] {
			return nil, fmt.Errorf("reference cycle through subject '%s' version %d", ref.Subject, v.version)
		}
		visiting[k] = true
		sub, err := r.resolveRefs(rec.References, depth+1, visiting)
		delete(visiting, k)
		if err != nil {
			return nil, err
		}
		for _, d := range append(sub, compat.Dependency{Name: ref.Name, Schema: rec.Schema}) {
			if !seen[d.Name] {
				seen[d.Name] = true
				deps = append(deps, d)
			}
		}
	}
	return deps, nil
}

func (r *Registry) refVersion(ref Reference) (*versionRec, error) {
	sub := r.subjects[ref.Subject]
	var v *versionRec
	if ref.Version == -1 {
		if live := sub.live(); len(live) > 0 {
			v = live[len(live)-1]
		}
	} else {
		v = sub.find(ref.Version)
	}
	if v == nil {
		return nil, fmt.Errorf("reference %q: subject '%s' version %d not found", ref.Name, ref.Subject, ref.Version)
	}
	return v, nil
}

// ReferencedBy lists the ids of schemas that reference subject version.
func (r *Registry) ReferencedBy(subject string, version int) ([]int, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, err := r.lookupVersion(subject, version, false)
	if err != nil {
		return nil, err
	}
	out := []int{}
	for _, by := range r.referrers(subject, v.version, true) {
		if !slices.Contains(out, by.id) {
			out = append(out, by.id)
		}
	}
	sort.Ints(out)
	return out, nil
}

type referrer struct {
	subject string
	version int
	id      int
}

// referrers lists subject versions whose schema references subject@version.
func (r *Registry) referrers(subject string, version int, liveOnly bool) []referrer {
	var out []referrer
	for name, sub := range r.subjects {
		for _, v := range sub.versions {
			if liveOnly && v.deleted {
				continue
			}
			rec := r.schemas[v.id]
			if rec == nil {
				continue
			}
			for _, ref := range rec.References {
				if ref.Subject == subject && ref.Version == version {
					out = append(out, referrer{subject: name, version: v.version, id: v.id})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].subject != out[j].subject {
			return out[i].subject < out[j].subject
		}
		return out[i].version < out[j].version
	})
	return out
}

func (r *Registry) checkUnreferenced(subject string, version int, liveOnly bool) *Error {
	refs := r.referrers(subject, version, liveOnly)
	if len(refs) == 0 {
		return nil
	}
	var by []string
	for _, x := range refs {
		by = append(by, fmt.Sprintf("%s/%d", x.subject, x.version))
	}
	return errReferenceExists(subject, version, by)
}
