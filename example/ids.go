package main

import (
	"crypto/rand"
	"encoding/hex"
)

// newPaymentID returns "pay_" and 16 random hex digits: unique across
// worker processes without any coordination between them.
func newPaymentID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "pay_" + hex.EncodeToString(b[:])
}
