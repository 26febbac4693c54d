package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/sluice-ai/sluice/go-control/internal/api"
)

const schemasUsage = "usage: sluicectl schemas diff SUBJECT V1 V2 | contract SUBJECT VERSION"

// schemasCmd reads the registry's contracts: the per-field verdict table
// between two versions of a subject, or one version's snapshot.
func schemasCmd(c *client, p *printer, rest []string) error {
	switch {
	case len(rest) == 4 && rest[0] == "diff":
		return schemasDiff(c, p, rest[1], rest[2], rest[3])
	case len(rest) == 3 && rest[0] == "contract":
		return schemasContract(c, p, rest[1], rest[2])
	}
	return usageError(schemasUsage)
}

func registryPath(subject string, tail string) string {
	return "/registry/subjects/" + url.PathEscape(subject) + tail
}

func schemasDiff(c *client, p *printer, subject, from, to string) error {
	q := url.Values{"from": {from}, "to": {to}}
	var doc api.DiffDoc
	if done, err := p.fetch(c, "GET", registryPath(subject, "/diff?"+q.Encode()), nil, &doc); done {
		return err
	}
	verdict := "compatible"
	if !doc.Compatible {
		verdict = "incompatible"
	}
	fmt.Fprintf(p.w, "%s: version %d -> %d (%s): %s under %s\n", doc.Subject, doc.From, doc.To, doc.SchemaType, verdict, doc.Compatibility)
	if len(doc.Differences) == 0 {
		fmt.Fprintln(p.w, "no differences")
		return nil
	}
	rows := make([][]string, 0, len(doc.Differences))
	var notes []string
	for _, d := range doc.Differences {
		rule := d.Rule
		if d.ForwardRule != "" {
			rule += " / " + d.ForwardRule
		}
		rows = append(rows, []string{d.Path, rule, d.Backward, d.Forward})
		if d.Backward != "compatible" {
			notes = append(notes, fmt.Sprintf("%s (backward %s): %s", d.Path, d.Backward, d.Message))
		}
		if d.Forward != "compatible" {
			msg := d.Message
			if d.ForwardMessage != "" {
				msg = d.ForwardMessage
			}
			notes = append(notes, fmt.Sprintf("%s (forward %s): %s", d.Path, d.Forward, msg))
		}
	}
	p.table("PATH\tRULE\tBACKWARD\tFORWARD", rows)
	if len(notes) > 0 {
		fmt.Fprintln(p.w, strings.Join(notes, "\n"))
	}
	return nil
}

func schemasContract(c *client, p *printer, subject, version string) error {
	var doc api.ContractDoc
	if done, err := p.fetch(c, "GET", registryPath(subject, "/versions/"+url.PathEscape(version)+"/contract"), nil, &doc); done {
		return err
	}
	fmt.Fprintf(p.w, "%s version %d: schema id %d (%s), %s\n", doc.Subject, doc.Version, doc.ID, doc.SchemaType, doc.Fingerprint)
	rows := make([][]string, 0, len(doc.Fields))
	for _, f := range doc.Fields {
		var marks []string
		if f.Required {
			marks = append(marks, "required")
		}
		if f.Deprecated {
			marks = append(marks, "deprecated")
		}
		rows = append(rows, []string{f.Path, f.Type, strings.Join(marks, ",")})
	}
	p.table("PATH\tTYPE\t", rows)
	if doc.FieldsTruncated {
		fmt.Fprintln(p.w, "(field list cut at the limit)")
	}
	return nil
}
