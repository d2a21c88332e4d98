package audit

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzParse: any input either parses or is an error, and whatever parses
// survives a write/read round trip unchanged.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"time":"2026-01-01T00:00:00Z","method":"Write","nodeID":"a","code":"OK"}` + "\n"))
	f.Add([]byte("{}\n{\"method\":\"x\"}\n{\"meth"))
	f.Add([]byte("\n\n  \n"))
	f.Add([]byte("[]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := Parse(bytes.NewReader(data))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		for _, r := range recs {
			line, err := json.Marshal(r)
			if err != nil {
				t.Fatalf("re-encode %+v: %v", r, err)
			}
			buf.Write(append(line, '\n'))
		}
		again, err := Parse(&buf)
		if err != nil || len(again) != len(recs) {
			t.Fatalf("round trip: %d records, %v; want %d", len(again), err, len(recs))
		}
		for i := range recs {
			if !again[i].Time.Equal(recs[i].Time) {
				t.Fatalf("record %d time changed: %v -> %v", i, recs[i].Time, again[i].Time)
			}
			again[i].Time = recs[i].Time
			if again[i] != recs[i] {
				t.Fatalf("record %d changed: %+v -> %+v", i, recs[i], again[i])
			}
		}
	})
}
