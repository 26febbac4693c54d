package compat

import (
	"fmt"
	"slices"
	"strings"
)

// Verdict is what one difference does to one direction of reading.
type Verdict string

const (
	// Compatible: readers of that direction are not affected.
	Compatible Verdict = "compatible"
	// Breaking: readers of that direction may fail; a level that checks
	// the direction refuses the new version.
	Breaking Verdict = "breaking"
	// Warning: it would be breaking, but it removes an element the old
	// version marked deprecated; no level refuses it.
	Warning Verdict = "warning"
)

// Difference is one change between an old and a new version of a schema.
// Every compatibility level is decided from the list Diff returns and
// nothing else, so a verdict always comes with its explanation.
type Difference struct {
	// Path locates the change: a JSON pointer into the schema for JSON
	// Schema ("#/properties/a") and Avro ("/fields/a/type"), Confluent's
	// "#/Message/<field number>" for Protobuf, "/inputs/x" for TENSOR.
	Path string `json:"path"`
	// Rule names the change as Confluent Schema Registry does when it has
	// a name for it (TYPE_CHANGED, READER_FIELD_MISSING_DEFAULT_VALUE,
	// FIELD_ADDED, ...); Sluice's own names otherwise (docs/schemas.md).
	Rule string `json:"rule"`
	// Backward: can the new schema read data written with the old one?
	Backward Verdict `json:"backward"`
	// Forward: can the old schema read data written with the new one?
	Forward Verdict `json:"forward"`
	// Message says what changed, in words.
	Message string `json:"message"`
	// ForwardRule and ForwardMessage name the change as the forward check
	// sees it (old schema reading new data), when that differs from Rule:
	// a property Rule calls removed is one the forward check sees added.
	ForwardRule    string `json:"forward_rule,omitempty"`
	ForwardMessage string `json:"forward_message,omitempty"`
	// Category is, for Protobuf, the most lenient of buf's breaking
	// categories (FILE, PACKAGE, WIRE_JSON, WIRE) whose rules flag the
	// change; empty when none does.
	Category string `json:"category,omitempty"`
}

// Breaks reports whether d fails level: breaking in a direction the level
// checks.
func (d Difference) Breaks(level Level) bool {
	return (level.backward() && d.Backward == Breaking) || (level.forward() && d.Forward == Breaking)
}

// Warns reports whether d is a warning in a direction level checks.
func (d Difference) Warns(level Level) bool {
	return (level.backward() && d.Backward == Warning) || (level.forward() && d.Forward == Warning)
}

// finding is one difference as one directional comparison sees it:
// compare(original, update) describes the change from original to update
// and decides whether update can read data written with original.
type finding struct {
	path    string
	rule    string
	ok      bool // update reads original's data
	message string
	buf     string // Protobuf: buf category
}

// side names the two schemas of a directional comparison in messages.
type side struct{ orig, upd string }

var (
	backSide = side{orig: "old", upd: "new"}
	fwdSide  = side{orig: "new", upd: "old"}
)

// comparer compares two parsed schemas of one type in one direction.
type comparer func(original, update Schema, s side) []finding

func comparerFor(t Type) comparer {
	switch t {
	case Avro:
		return avroCompare
	case Protobuf:
		return protoCompare
	case JSON:
		return jsonCompare
	case Tensor:
		return tensorCompare
	}
	return nil
}

// Diff lists every difference between old and new, each with its verdict
// in both directions. It runs the format's comparison twice, old to new
// (the backward check: Confluent's compare(previous, this)) and new to old
// (the forward check), and pairs what the two see at the same path.
// Removals of elements old marks deprecated are warnings, not breaking.
func Diff(old, new Schema) (diffs []Difference) {
	defer func() {
		if p := recover(); p != nil {
			diffs = []Difference{{Path: "/", Rule: "CHECK_FAILED", Backward: Breaking, Forward: Breaking,
				Message: fmt.Sprintf("the comparison failed: %v", p)}}
		}
	}()
	if old.Type() != new.Type() {
		return []Difference{{Path: "/", Rule: "SCHEMA_TYPE_CHANGED", Backward: Breaking, Forward: Breaking,
			Message: fmt.Sprintf("the old schema is %s but the new schema is %s", old.Type(), new.Type())}}
	}
	cmp := comparerFor(old.Type())
	if cmp == nil {
		return []Difference{{Path: "/", Rule: "SCHEMA_TYPE_CHANGED", Backward: Breaking, Forward: Breaking,
			Message: "unknown schema implementation"}}
	}
	back := dedupe(cmp(old, new, backSide))
	fwd := dedupe(cmp(new, old, fwdSide))
	diffs = merge(back, fwd)
	applyDeprecation(diffs, old, new)
	return diffs
}

func dedupe(fs []finding) []finding {
	seen := make(map[[2]string]bool, len(fs))
	out := fs[:0]
	for _, f := range fs {
		k := [2]string{f.path, f.rule}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, f)
	}
	return out
}

func verdict(ok bool) Verdict {
	if ok {
		return Compatible
	}
	return Breaking
}

// merge pairs the two directions: a backward finding and a forward one at
// the same path are the same change seen from both sides. At each path a
// finding pairs first with one of the same rule, then with the first one
// left; every forward finding pairs at most once, and one left over
// becomes a difference of its own, compatible backward. So each direction's
// verdicts are exactly its comparison's.
func merge(back, fwd []finding) []Difference {
	fwdAt := make(map[string][]int, len(fwd))
	for i, f := range fwd {
		fwdAt[f.path] = append(fwdAt[f.path], i)
	}
	used := make([]bool, len(fwd))
	pair := make([]int, len(back))
	for i, b := range back {
		pair[i] = -1
		for _, j := range fwdAt[b.path] {
			if !used[j] && fwd[j].rule == b.rule {
				pair[i], used[j] = j, true
				break
			}
		}
	}
	for i, b := range back {
		if pair[i] >= 0 {
			continue
		}
		for _, j := range fwdAt[b.path] {
			if !used[j] {
				pair[i], used[j] = j, true
				break
			}
		}
	}
	out := make([]Difference, 0, len(back)+len(fwd))
	for i, b := range back {
		d := Difference{Path: b.path, Rule: b.rule, Backward: verdict(b.ok), Forward: Compatible, Message: b.message, Category: b.buf}
		if j := pair[i]; j >= 0 {
			f := fwd[j]
			d.Forward = verdict(f.ok)
			if f.rule != b.rule {
				d.ForwardRule, d.ForwardMessage = f.rule, f.message
			}
			if d.Category == "" {
				d.Category = f.buf
			}
		}
		out = append(out, d)
	}
	for j, f := range fwd {
		if !used[j] {
			out = append(out, Difference{Path: f.path, Rule: f.rule, Backward: Compatible, Forward: verdict(f.ok),
				Message: f.message, Category: f.buf})
		}
	}
	return out
}

// applyDeprecation turns the breaking verdicts of a removal into warnings
// when the removed element (or one enclosing it) is marked deprecated in
// old: its users were told it would go.
func applyDeprecation(diffs []Difference, old, new Schema) {
	oldC, newC := Fields(old), Fields(new)
	deprecated := map[string]bool{}
	for _, f := range oldC {
		if f.Deprecated {
			deprecated[f.Path] = true
		}
	}
	if len(deprecated) == 0 {
		return
	}
	present := make(map[string]bool, len(newC))
	for _, f := range newC {
		present[f.Path] = true
	}
	for i := range diffs {
		d := &diffs[i]
		if !removedDeprecated(d.Path, deprecated, present) {
			continue
		}
		if d.Backward == Breaking {
			d.Backward = Warning
		}
		if d.Forward == Breaking {
			d.Forward = Warning
		}
	}
}

// removedDeprecated reports whether path or one of its ancestors is a
// deprecated element of the old schema that the new one no longer has.
func removedDeprecated(path string, deprecated, present map[string]bool) bool {
	for p := path; p != ""; {
		if deprecated[p] && !present[p] {
			return true
		}
		i := strings.LastIndexByte(p, '/')
		if i <= 0 {
			return false
		}
		p = p[:i]
	}
	return false
}

// Issue is one reason why a reader cannot read a writer's data.
type Issue struct {
	// Rule is an upper-case error type, e.g. READER_FIELD_MISSING_DEFAULT_VALUE.
	Rule string
	// Path locates the offending element, e.g. /fields/price/type.
	Path string
	// Description says what breaks in words.
	Description string
}

// String renders the issue the way Confluent renders compatibility messages.
func (i Issue) String() string {
	return fmt.Sprintf("{errorType:'%s', description:'%s', additionalInfo:'%s'}", i.Rule, i.Description, i.Path)
}

// CanRead lists why data written with writer cannot be read with reader
// (the breaking findings of the comparison writer to reader); an empty list
// means it can. Schemas of different types never match.
func CanRead(reader, writer Schema) (issues []Issue) {
	defer func() {
		if p := recover(); p != nil {
			issues = []Issue{{Rule: "CHECK_FAILED", Path: "/", Description: fmt.Sprintf("the compatibility check failed: %v", p)}}
		}
	}()
	if reader.Type() != writer.Type() {
		return []Issue{{Rule: "SCHEMA_TYPE_CHANGED", Path: "/",
			Description: fmt.Sprintf("the reader schema is %s but the writer schema is %s", reader.Type(), writer.Type())}}
	}
	for _, f := range dedupe(comparerFor(reader.Type())(writer, reader, side{orig: "writer", upd: "reader"})) {
		if !f.ok {
			issues = append(issues, Issue{Rule: f.rule, Path: f.path, Description: f.message})
		}
	}
	return issues
}

// Version is an earlier registered schema with its version number.
type Version struct {
	Version int
	Schema  Schema
	Text    string
}

// VersionDifference is a difference against one earlier version.
type VersionDifference struct {
	Version int `json:"version"`
	Difference
}

// Result is the outcome of a compatibility check: Messages in Confluent's
// shape and the differences they were rendered from (those that break or
// warn under the level, newest version first). Compatible when no
// difference breaks.
type Result struct {
	Messages    []string
	Differences []VersionDifference
}

// Compatible reports whether nothing breaks.
func (r Result) Compatible() bool { return len(r.Messages) == 0 }

// DifferencesMax bounds the differences a Result carries (the messages
// still list every failing version).
const DifferencesMax = 1000

// Check decides whether candidate may follow previous (oldest first, live
// versions only) under level, from Diff's list against each version the
// level names. For each failing version it renders Confluent's messages:
// each breaking difference, then {oldSchemaVersion: N}, {oldSchema: '...'}
// and {compatibility: 'LEVEL'}.
func Check(level Level, candidate Schema, previous []Version) Result {
	var res Result
	if level == None || len(previous) == 0 {
		return res
	}
	against := previous
	if !level.transitive() {
		against = previous[len(previous)-1:]
	}
	// Newest first, as Confluent reports the closest conflict first.
	for i := len(against) - 1; i >= 0; i-- {
		old := against[i]
		var msgs []string
		for _, d := range Diff(old.Schema, candidate) {
			if d.Breaks(level) || d.Warns(level) {
				if len(res.Differences) < DifferencesMax {
					res.Differences = append(res.Differences, VersionDifference{Version: old.Version, Difference: d})
				}
			}
			if level.backward() && d.Backward == Breaking {
				msgs = append(msgs, Issue{Rule: d.Rule, Path: d.Path, Description: d.Message}.String())
			}
			if level.forward() && d.Forward == Breaking {
				rule, msg := d.Rule, d.Message
				if d.ForwardRule != "" {
					rule, msg = d.ForwardRule, d.ForwardMessage
				}
				m := Issue{Rule: rule, Path: d.Path, Description: msg}.String()
				if !slices.Contains(msgs, m) {
					msgs = append(msgs, m)
				}
			}
		}
		if len(msgs) == 0 {
			continue
		}
		res.Messages = append(res.Messages, msgs...)
		res.Messages = append(res.Messages,
			fmt.Sprintf("{oldSchemaVersion: %d}", old.Version),
			fmt.Sprintf("{oldSchema: '%s'}", old.Text),
			fmt.Sprintf("{compatibility: '%s'}", level))
	}
	return res
}
