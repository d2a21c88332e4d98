package app

import (
	"maps"
	"slices"
	"testing"
)

func TestEnabledControllers(t *testing.T) {
	tests := []struct {
		name    string
		spec    []string
		want    []string
		wantErr bool
	}{
		{"star enables the default set", []string{"*"}, []string{"force-eviction", "podgc", "quarantine"}, false},
		{"star minus one", []string{"*", "-quarantine"}, []string{"force-eviction", "podgc"}, false},
		{"star plus opt-in", []string{"*", "out-of-service-taint-removal"}, []string{"force-eviction", "out-of-service-taint-removal", "podgc", "quarantine"}, false},
		{"explicit list only", []string{"podgc"}, []string{"podgc"}, false},
		{"blanks ignored", []string{" podgc ", ""}, []string{"podgc"}, false},
		{"nothing", nil, []string{}, false},
		{"unknown name", []string{"*", "gc"}, nil, true},
		{"unknown disabled name", []string{"-gc"}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EnabledControllers(tc.spec)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			names := slices.Sorted(maps.Keys(got))
			if !slices.Equal(names, tc.want) {
				t.Errorf("got %v, want %v", names, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults must be valid: %v", err)
	}
	for name, mutate := range map[string]func(*Options){
		"workers=0":          func(o *Options) { o.Workers = 0 },
		"negative delay":     func(o *Options) { o.QuarantineDelay = -1 },
		"unknown controller": func(o *Options) { o.Controllers = []string{"nope"} },
	} {
		bad := DefaultOptions()
		mutate(&bad)
		if err := bad.Validate(); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}
