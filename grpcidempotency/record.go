package grpcidempotency

import "google.golang.org/grpc/codes"

// DefaultRecordPolicy is the record policy unless WithRecordPolicy sets
// another: it records OK and the codes a retry of the same request cannot
// change (InvalidArgument, NotFound, AlreadyExists, PermissionDenied,
// FailedPrecondition, OutOfRange, Unauthenticated), and releases the key on
// every other code, which a retry may cure.
func DefaultRecordPolicy(_ string, code codes.Code) bool {
	switch code {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists,
		codes.PermissionDenied, codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated:
		return true
	default:
		return false
	}
}
