package initiator

import (
	"bytes"
	"testing"
)

func TestPDURoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 3, 4, 5, 24} {
		p := &pdu{data: bytes.Repeat([]byte{0xab}, n)}
		p.bhs[0] = opSCSICmd
		p.setU32(16, 0x01020304)
		var buf bytes.Buffer
		if err := p.write(&buf); err != nil {
			t.Fatal(err)
		}
		if buf.Len()%4 != 0 || buf.Len() < 48+n {
			t.Fatalf("%d data bytes: %d on the wire, want 48 + data padded to 4", n, buf.Len())
		}
		got, err := readPDU(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if got.opcode() != opSCSICmd || got.u32(16) != 0x01020304 || !bytes.Equal(got.data, p.data) || buf.Len() != 0 {
			t.Fatalf("%d data bytes: read back %+v, %d bytes left", n, got, buf.Len())
		}
	}
	if _, err := readPDU(bytes.NewReader(make([]byte, 20))); err == nil {
		t.Fatal("a truncated header read")
	}
}

func TestTextKey(t *testing.T) {
	data := []byte("TargetAlias=x\x00ImmediateData=Yes\x00MaxRecvDataSegmentLength=8192\x00")
	tests := map[string]string{"ImmediateData": "Yes", "MaxRecvDataSegmentLength": "8192", "InitialR2T": "", "Target": ""}
	for k, want := range tests {
		if got := textKey(data, k); got != want {
			t.Errorf("textKey(%q) = %q, want %q", k, got, want)
		}
	}
}

func TestStatusError(t *testing.T) {
	resp := func(status byte, sense []byte) *pdu {
		p := &pdu{bhs: [48]byte{0: opSCSIResp, 3: status}}
		if sense != nil {
			p.data = append([]byte{0, byte(len(sense))}, sense...)
		}
		return p
	}
	fixed := func(key, asc, ascq byte) []byte {
		s := make([]byte, 18)
		s[0], s[2], s[12], s[13] = 0x70, key, asc, ascq
		return s
	}
	tests := []struct {
		name string
		p    *pdu
		want StatusError
	}{
		{name: "reservation conflict, no sense", p: resp(StatusReservationConflict, nil), want: StatusError{Status: 0x18, CDBOperation: 0x2a}},
		{name: "unit attention, reservations preempted", p: resp(statusCheckCondition, fixed(senseUnitAttention, 0x2a, 0x03)), want: StatusError{Status: 2, SenseKey: 6, ASC: 0x2a, ASCQ: 3, CDBOperation: 0x2a}},
		{name: "short sense", p: resp(statusCheckCondition, []byte{0x70, 0, 0x05}), want: StatusError{Status: 2, SenseKey: 5, CDBOperation: 0x2a}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := *statusError(0x2a, tc.p); got != tc.want {
				t.Fatalf("statusError = %+v, want %+v", got, tc.want)
			}
		})
	}
}
