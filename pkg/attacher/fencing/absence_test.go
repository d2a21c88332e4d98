package fencing

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestFencedByAbsence(t *testing.T) {
	notFound := status.Error(codes.NotFound, "node ID old-id not known")
	tests := []struct {
		name   string
		fenced bool
		err    error
		want   bool
	}{
		{"fenced, OK", true, nil, false},
		{"fenced, NOT_FOUND: detached, fenced by absence", true, notFound, true},
		{"fenced, NOT_FOUND wrapped", true, fmt.Errorf("unpublish: %w", notFound), true},
		{"plain, NOT_FOUND: retried as upstream", false, notFound, false},
		{"fenced, FAILED_PRECONDITION", true, status.Error(codes.FailedPrecondition, "busy"), false},
		{"fenced, UNAVAILABLE", true, status.Error(codes.Unavailable, "down"), false},
		{"fenced, not a gRPC error", true, errors.New("connection refused"), false},
	}
	for _, tc := range tests {
		if got := FencedByAbsence(tc.fenced, tc.err); got != tc.want {
			t.Errorf("%s: FencedByAbsence() = %v, want %v", tc.name, got, tc.want)
		}
	}
}
