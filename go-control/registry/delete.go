package registry

// Soft and hard deletes of subjects and versions.

import (
	"context"
	"errors"
	"slices"
)

// DeleteSubject soft-deletes every live version of subject, or, with
// permanent, removes a soft-deleted subject for good. It returns the
// versions affected.
func (r *Registry) DeleteSubject(ctx context.Context, subject string, permanent bool) (versions []int, err error) {
	err = r.write(ctx, func(changes *[]Change) error {
		var err error
		versions, err = r.deleteSubject(ctx, subject, permanent, changes)
		return err
	})
	return versions, err
}

func (r *Registry) deleteSubject(ctx context.Context, subject string, permanent bool, changes *[]Change) ([]int, error) {
	sub := r.subjects[subject]
	if sub == nil || len(sub.versions) == 0 {
		return nil, errSubjectNotFound(subject)
	}
	live := sub.live()
	var out []int
	if !permanent {
		if len(live) == 0 {
			return nil, errSubjectSoftDeleted(subject)
		}
		for _, v := range live {
			if e := r.checkUnreferenced(subject, v.version, true); e != nil {
				return nil, e
			}
		}
		for _, v := range live {
			if err := r.retire(ctx, subject, v); err != nil {
				return out, err
			}
			out = append(out, v.version)
			*changes = append(*changes, r.change(ChangeRetired, subject, v))
		}
		return out, nil
	}
	if len(live) > 0 {
		return nil, errSubjectNotSoftDeleted(subject)
	}
	for _, v := range sub.versions {
		if e := r.checkUnreferenced(subject, v.version, false); e != nil {
			return nil, e
		}
	}
	for _, v := range slices.Clone(sub.versions) {
		c := r.change(ChangeDeleted, subject, v)
		if err := r.remove(ctx, sub, v); err != nil {
			return out, err
		}
		out = append(out, v.version)
		*changes = append(*changes, c)
	}
	if sub.levelRev != 0 {
		if err := r.store.Delete(ctx, keyConfigSubject+subjectKey(subject), sub.levelRev); err != nil && !errors.Is(err, ErrNotFound) {
			return out, storeErr(err)
		}
	}
	delete(r.subjects, subject)
	return out, nil
}

func (r *Registry) retire(ctx context.Context, subject string, v *versionRec) error {
	rev, err := r.putJSON(ctx, versionKey(subject, v.version), versionVal{Subject: subject, Version: v.version, ID: v.id, Deleted: true}, v.rev)
	if err != nil {
		return storeErr(err)
	}
	v.deleted, v.rev = true, rev
	return nil
}

// remove hard-deletes a version and drops its schema when nothing else
// holds it. Schema ids are never reused: the id counter only grows.
func (r *Registry) remove(ctx context.Context, sub *subjectRec, v *versionRec) error {
	if err := r.store.Delete(ctx, versionKey(sub.name, v.version), v.rev); err != nil {
		return storeErr(err)
	}
	sub.versions = slices.DeleteFunc(sub.versions, func(x *versionRec) bool { return x == v })
	for _, other := range r.subjects {
		for _, ov := range other.versions {
			if ov.id == v.id {
				return nil
			}
		}
	}
	rec := r.schemas[v.id]
	if rec == nil {
		return nil
	}
	if err := r.store.Delete(ctx, schemaKey(rec.ID), rec.rev); err != nil && !errors.Is(err, ErrNotFound) {
		return storeErr(err)
	}
	if rec.contractRev != 0 {
		if err := r.store.Delete(ctx, contractKey(rec.ID), rec.contractRev); err != nil && !errors.Is(err, ErrNotFound) {
			return storeErr(err)
		}
	}
	delete(r.schemas, rec.ID)
	if r.byKey[rec.key] == rec.ID {
		delete(r.byKey, rec.key)
	}
	return nil
}

// DeleteVersion soft-deletes one version, or with permanent removes a
// soft-deleted one. version may be Latest.
func (r *Registry) DeleteVersion(ctx context.Context, subject string, version int, permanent bool) (deleted int, err error) {
	err = r.write(ctx, func(changes *[]Change) error {
		var err error
		deleted, err = r.deleteVersion(ctx, subject, version, permanent, changes)
		return err
	})
	return deleted, err
}

func (r *Registry) deleteVersion(ctx context.Context, subject string, version int, permanent bool, changes *[]Change) (int, error) {
	sub := r.subjects[subject]
	if sub == nil || len(sub.versions) == 0 {
		return 0, errSubjectNotFound(subject)
	}
	var v *versionRec
	if version == Latest {
		pool := sub.live()
		if permanent {
			pool = sub.versions
		}
		if len(pool) > 0 {
			v = pool[len(pool)-1]
		}
	} else {
		v = sub.find(version)
	}
	if v == nil {
		return 0, errVersionNotFound(version)
	}
	if !permanent {
		if v.deleted {
			return 0, errVersionSoftDeleted(subject, v.version)
		}
		if e := r.checkUnreferenced(subject, v.version, true); e != nil {
			return 0, e
		}
		if err := r.retire(ctx, subject, v); err != nil {
			return 0, err
		}
		*changes = append(*changes, r.change(ChangeRetired, subject, v))
		return v.version, nil
	}
	if !v.deleted {
		return 0, errVersionNotSoftDeleted(subject, v.version)
	}
	if e := r.checkUnreferenced(subject, v.version, false); e != nil {
		return 0, e
	}
	c := r.change(ChangeDeleted, subject, v)
	if err := r.remove(ctx, sub, v); err != nil {
		return 0, err
	}
	*changes = append(*changes, c)
	return v.version, nil
}
