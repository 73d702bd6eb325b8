package grpcidempotency

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// recordingStream passes the handler's header and trailer metadata on to
// the call's stream and keeps what the stream accepted, for the record.
type recordingStream struct {
	grpc.ServerTransportStream
	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
}

func (s *recordingStream) SetHeader(md metadata.MD) error {
	return s.keep(&s.header, md, s.ServerTransportStream.SetHeader(md))
}

func (s *recordingStream) SendHeader(md metadata.MD) error {
	return s.keep(&s.header, md, s.ServerTransportStream.SendHeader(md))
}

func (s *recordingStream) SetTrailer(md metadata.MD) error {
	return s.keep(&s.trailer, md, s.ServerTransportStream.SetTrailer(md))
}

// keep adds md to kept unless the stream refused it with err.
func (s *recordingStream) keep(kept *metadata.MD, md metadata.MD, err error) error {
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	*kept = metadata.Join(*kept, md)
	return nil
}

// recorded returns the metadata kept so far; keep replaces, never changes,
// what it returned.
func (s *recordingStream) recorded() (header, trailer metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.header, s.trailer
}
