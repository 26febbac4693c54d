package registry

import (
	"fmt"

	"github.com/sluice-ai/sluice/go-control/registry/compat"
)

// Contract returns a subject version and the contract snapshot stored with
// its schema. version may be Latest.
func (r *Registry) Contract(subject string, version int, deleted bool) (SubjectVersion, compat.Contract, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, err := r.lookupVersion(subject, version, deleted)
	if err != nil {
		return SubjectVersion{}, compat.Contract{}, err
	}
	rec := r.schemas[v.id]
	if rec == nil || rec.contract == nil {
		return SubjectVersion{}, compat.Contract{}, errStore(fmt.Errorf("schema %d of subject '%s' version %d cannot be parsed", v.id, subject, v.version))
	}
	return r.info(v, subject), *rec.contract, nil
}

// DiffResult is the difference between two versions of a subject.
type DiffResult struct {
	From, To SubjectVersion
	// Level is the subject's compatibility level; Compatible says whether
	// To may follow From under it (checked against From alone).
	Level       compat.Level
	Compatible  bool
	Differences []compat.Difference
}

// Diff lists the differences between two versions of subject. to may be
// Latest; from 0 means the live version before to.
func (r *Registry) Diff(subject string, from, to int, deleted bool) (DiffResult, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	tv, err := r.lookupVersion(subject, to, deleted)
	if err != nil {
		return DiffResult{}, err
	}
	var fv *versionRec
	if from == 0 {
		for _, v := range r.subjects[subject].versions {
			if v.version < tv.version && (!v.deleted || deleted) {
				fv = v
			}
		}
		if fv == nil {
			return DiffResult{}, newErr(CodeVersionNotFound, 404, "Subject '%s' has no version before %d to compare with.", subject, tv.version)
		}
	} else if fv, err = r.lookupVersion(subject, from, deleted); err != nil {
		return DiffResult{}, err
	}
	fr, tr := r.schemas[fv.id], r.schemas[tv.id]
	if fr == nil || tr == nil || fr.parsed == nil || tr.parsed == nil {
		return DiffResult{}, errStore(fmt.Errorf("subject '%s': a schema of versions %d or %d cannot be parsed", subject, fv.version, tv.version))
	}
	level := r.levelFor(subject)
	res := DiffResult{From: r.info(fv, subject), To: r.info(tv, subject), Level: level, Compatible: true,
		Differences: compat.Diff(fr.parsed, tr.parsed)}
	for _, d := range res.Differences {
		if d.Breaks(level) {
			res.Compatible = false
		}
	}
	if res.Differences == nil {
		res.Differences = []compat.Difference{}
	}
	return res, nil
}
