package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sluice-ai/sluice/go-control/internal/api"
)

// jobs prints the JetStream ingress: per stream, the consumer's lag and
// ack-pending count, what this appliance holds, and its counters.
func jobs(c *client, p *printer, rest []string) error {
	if len(rest) != 0 {
		return usageError("usage: sluicectl jobs")
	}
	var doc api.JobsDoc
	if done, err := p.fetch(c, "GET", "/v1/jobs", nil, &doc); done {
		return err
	}
	if !doc.Enabled {
		fmt.Fprintln(p.w, "jobs: no [[jobs.streams]] configured (docs/jobs.md)")
		return nil
	}
	var rows [][]string
	for _, s := range doc.Streams {
		k := s.Counters
		rows = append(rows, []string{s.Stream, s.Consumer, s.State, fmt.Sprint(s.Lag),
			fmt.Sprintf("%d/%d", s.AckPending, s.MaxAckPending), fmt.Sprint(s.InFlight),
			fmt.Sprint(k.Received), fmt.Sprint(k.Acked), fmt.Sprint(k.Naked), fmt.Sprint(k.DeadLettered),
			fmt.Sprint(k.Redelivered), fmt.Sprint(k.Results), fmt.Sprint(k.Duplicates), fmt.Sprint(k.Expired)})
	}
	p.table("STREAM\tCONSUMER\tSTATE\tLAG\tACK_PENDING\tIN_FLIGHT\tRECEIVED\tACKED\tNAKED\tDEAD\tREDELIVERED\tRESULTS\tDUPLICATES\tEXPIRED", rows)
	nats := or(doc.Connected, "not connected")
	if doc.Draining {
		nats += " (draining)"
	}
	fmt.Fprintf(p.w, "nats: %s\n", nats)
	for _, s := range doc.Streams {
		if len(s.Counters.DeadLetterCodes) > 0 {
			codes := make([]string, 0, len(s.Counters.DeadLetterCodes))
			for code, n := range s.Counters.DeadLetterCodes {
				codes = append(codes, fmt.Sprintf("%s=%d", code, n))
			}
			sort.Strings(codes)
			fmt.Fprintf(p.w, "%s dead letters: %s\n", s.Stream, strings.Join(codes, " "))
		}
		if s.LastError != "" {
			fmt.Fprintf(p.w, "%s last error: %s\n", s.Stream, s.LastError)
		}
	}
	return nil
}
