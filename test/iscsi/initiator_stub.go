//go:build !libiscsi || !cgo

package iscsi

// Session is an iSCSI session to one LUN. Without the libiscsi build tag
// there is none: Login always fails.
type Session struct{}

func available() error { return ErrUnavailable }

// Login returns ErrUnavailable: the initiator is not built in.
func Login(Options) (*Session, error) { return nil, ErrUnavailable }

// BlockSize is never reached without the initiator.
func (*Session) BlockSize() int { return 0 }

// Blocks is never reached without the initiator.
func (*Session) Blocks() uint64 { return 0 }

// Write returns ErrUnavailable.
func (*Session) Write(uint32, []byte) error { return ErrUnavailable }

// Read returns ErrUnavailable.
func (*Session) Read(uint32, int) ([]byte, error) { return nil, ErrUnavailable }

// Close does nothing.
func (*Session) Close() error { return nil }
