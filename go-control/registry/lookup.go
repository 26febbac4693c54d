package registry

// Read paths: subjects, versions and schemas by subject, version or id.

import (
	"sort"

	"github.com/sluice-ai/sluice/go-control/registry/compat"
)

// Lookup finds the version of subject that holds in.
func (r *Registry) Lookup(subject string, in SchemaInput, deleted bool) (SubjectVersion, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	sub := r.subjects[subject]
	if sub == nil || (len(sub.live()) == 0 && !(deleted && len(sub.versions) > 0)) {
		return SubjectVersion{}, errSubjectNotFound(subject)
	}
	parsed, refs, err := r.prepare(in)
	if err != nil {
		return SubjectVersion{}, err
	}
	if in.Type == "" {
		in.Type = compat.Avro
	}
	id, ok := r.byKey[identity(in.Type, parsed, refs)]
	if ok {
		for i := len(sub.versions) - 1; i >= 0; i-- {
			v := sub.versions[i]
			if v.id == id && (!v.deleted || deleted) {
				return r.info(v, subject), nil
			}
		}
	}
	return SubjectVersion{}, errSchemaNotFound()
}

func (r *Registry) subjectNames(deleted bool) []string {
	var out []string
	for name, sub := range r.subjects {
		if len(sub.live()) > 0 || (deleted && len(sub.versions) > 0) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Subjects lists subjects with a live version (any version if deleted).
func (r *Registry) Subjects(deleted bool) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.subjectNames(deleted)
}

// Versions lists a subject's version numbers.
func (r *Registry) Versions(subject string, deleted bool) ([]int, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	sub := r.subjects[subject]
	var out []int
	if sub != nil {
		for _, v := range sub.versions {
			if !v.deleted || deleted {
				out = append(out, v.version)
			}
		}
	}
	if len(out) == 0 {
		return nil, errSubjectNotFound(subject)
	}
	return out, nil
}

// Latest is the version argument meaning "the newest live version".
const Latest = -1

// Version returns one version of subject; version may be Latest.
func (r *Registry) Version(subject string, version int, deleted bool) (SubjectVersion, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, err := r.lookupVersion(subject, version, deleted)
	if err != nil {
		return SubjectVersion{}, err
	}
	return r.info(v, subject), nil
}

func (r *Registry) lookupVersion(subject string, version int, deleted bool) (*versionRec, error) {
	sub := r.subjects[subject]
	if sub == nil || (len(sub.live()) == 0 && !(deleted && len(sub.versions) > 0)) {
		return nil, errSubjectNotFound(subject)
	}
	if version == Latest {
		pool := sub.live()
		if deleted {
			pool = sub.versions
		}
		if len(pool) == 0 {
			return nil, errVersionNotFound(version)
		}
		return pool[len(pool)-1], nil
	}
	v := sub.find(version)
	if v == nil || (v.deleted && !deleted) {
		return nil, errVersionNotFound(version)
	}
	return v, nil
}

// SchemaByID returns a schema by its global id.
func (r *Registry) SchemaByID(id int) (SchemaInfo, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	rec := r.schemas[id]
	if rec == nil {
		return SchemaInfo{}, errSchemaIDNotFound(id)
	}
	return rec.SchemaInfo, nil
}

// SubjectVersionRef names a subject version.
type SubjectVersionRef struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

// VersionsByID lists the subject versions holding schema id.
func (r *Registry) VersionsByID(id int, deleted bool) ([]SubjectVersionRef, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.schemas[id] == nil {
		return nil, errSchemaIDNotFound(id)
	}
	out := []SubjectVersionRef{}
	for _, name := range r.subjectNames(true) {
		for _, v := range r.subjects[name].versions {
			if v.id == id && (!v.deleted || deleted) {
				out = append(out, SubjectVersionRef{Subject: name, Version: v.version})
			}
		}
	}
	return out, nil
}
