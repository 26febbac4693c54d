package config

import (
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// positions maps key paths ("engine.workers", "shards[1].max_concurrency",
// "shards[1]") to the line where they are written, so that checks made after
// decoding can still point at a line.
type positions map[string]int

// line returns the line of key, or of its nearest written parent (a missing
// key is reported at the table that lacks it).
func (p positions) line(key string) int {
	for key != "" {
		if l, ok := p[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

func scanPositions(data []byte) (positions, error) {
	pos := positions{}
	counts := map[string]int{} // array-table path -> elements seen
	var parser unstable.Parser
	parser.Reset(data)
	table := ""
	// resolve turns key parts into a path, indexing parts that are arrays of
	// tables by their current (last) element, as TOML does.
	resolve := func(base string, parts []string) string {
		path := base
		for _, p := range parts {
			if path != "" {
				path += "."
			}
			path += p
			if n, ok := counts[path]; ok {
				path += "[" + strconv.Itoa(n-1) + "]"
			}
		}
		return path
	}
	for parser.NextExpression() {
		e := parser.Expression()
		line := exprLine(&parser, e)
		switch e.Kind {
		case unstable.Table:
			table = resolve("", keyParts(e))
			pos[table] = line
		case unstable.ArrayTable:
			parts := keyParts(e)
			parent := resolve("", parts[:len(parts)-1])
			name := parts[len(parts)-1]
			if parent != "" {
				name = parent + "." + name
			}
			counts[name]++
			table = name + "[" + strconv.Itoa(counts[name]-1) + "]"
			pos[table] = line
		case unstable.KeyValue:
			path := resolve(table, keyParts(e))
			pos[path] = line
			walkValue(&parser, e.Value(), path, pos)
		}
	}
	return pos, parser.Error()
}

// exprLine finds the line of an expression; table headers carry no range of
// their own, so their first key part is used.
func exprLine(p *unstable.Parser, e *unstable.Node) int {
	if e.Raw.Length > 0 {
		return p.Shape(e.Raw).Start.Line
	}
	if e.Kind == unstable.Table || e.Kind == unstable.ArrayTable {
		it := e.Key()
		if it.Next() && it.Node().Raw.Length > 0 {
			return p.Shape(it.Node().Raw).Start.Line
		}
	}
	return 0
}

func keyParts(n *unstable.Node) []string {
	var parts []string
	it := n.Key()
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
	}
	return parts
}

// walkValue records positions inside inline tables and arrays.
func walkValue(p *unstable.Parser, v *unstable.Node, path string, pos positions) {
	switch v.Kind {
	case unstable.InlineTable:
		it := v.Children()
		for it.Next() {
			kv := it.Node()
			if kv.Kind != unstable.KeyValue {
				continue
			}
			sub := path + "." + strings.Join(keyParts(kv), ".")
			if kv.Raw.Length > 0 {
				pos[sub] = p.Shape(kv.Raw).Start.Line
			} else {
				pos[sub] = pos[path]
			}
			walkValue(p, kv.Value(), sub, pos)
		}
	case unstable.Array:
		it := v.Children()
		i := 0
		for it.Next() {
			sub := path + "[" + strconv.Itoa(i) + "]"
			c := it.Node()
			if c.Raw.Length > 0 {
				pos[sub] = p.Shape(c.Raw).Start.Line
			} else {
				pos[sub] = pos[path]
			}
			walkValue(p, c, sub, pos)
			i++
		}
	}
}
