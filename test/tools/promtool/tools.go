//go:build tools

// Package tools pins promtool, which checks and unit-tests the alerting rules
// and dashboard queries under deploy/monitoring.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
