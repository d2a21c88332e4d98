//go:build tools

// Package tools pins promtool, which checks and unit-tests the alerting rules
// and dashboard queries under deploy/monitoring, and the Prometheus server
// that scrapes a local world and evaluates those rules on its real metrics.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
