package webhooks

import (
	"slices"
	"sync"
	"time"

	"github.com/tally-hq/tally/internal/endpoints"
)

// job is one attempt the local pipeline has to make.
type job struct {
	ref      endpoints.DeliveryRef
	endpoint string // the subscription or partner it goes to
	attempt  int    // counted in the delivery's current schedule
}

// outcome is what an attempt told about its endpoint.
type outcome int

const (
	unknown outcome = iota // nothing was sent (decided already, or another process has it)
	quick                  // the receiver answered, whatever it answered, within quickAnswer
	slow                   // it took longer, or never answered
)

// An endpoint that answers within quickAnswer gets up to
// endpointMaxInFlight attempts under way at once; one that is slower, or
// hangs until the attempt times out, gets one at a time.
const (
	quickAnswer         = time.Second
	endpointMaxInFlight = 256
)

// scheduler runs attempts fairly: round-robin across brands, then across
// each brand's endpoints, with limits on what is under way at once in all,
// per brand and per endpoint, so that an endpoint that hangs holds one
// attempt and a brand at most brandLimit (docs/decisions.md, "Fair local
// delivery"). Attempts run on their own goroutines, so waiting receivers
// cost no worker that others need.
type scheduler struct {
	limit, brandLimit int
	run               func(job) outcome

	mu       sync.Mutex
	known    map[string]bool // deliveries queued or under way
	limits   map[string]int  // brand/endpoint → its in-flight limit, kept while idle
	brands   map[string]*brandQueue
	ring     []*brandQueue // brands with queued or running attempts, in turn
	next     int
	inFlight int
	closed   bool
	wg       sync.WaitGroup
}

type brandQueue struct {
	id        string
	endpoints map[string]*endpointQueue
	ring      []*endpointQueue
	next      int
	inFlight  int
}

// endpointQueue holds an endpoint's queued attempts. Its limit starts at 1
// and doubles with every quick answer up to endpointMaxInFlight; a slow one
// sets it back to 1 (slow start, as TCP does).
type endpointQueue struct {
	key      string // brand/endpoint
	jobs     []job
	inFlight int
	limit    int
}

func newScheduler(limit, brandLimit int, run func(job) outcome) *scheduler {
	return &scheduler{limit: limit, brandLimit: brandLimit, run: run, known: map[string]bool{}, limits: map[string]int{}, brands: map[string]*brandQueue{}}
}

// add queues the jobs not queued or under way already and starts what the
// limits allow.
func (s *scheduler) add(jobs ...job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range jobs {
		if s.known[j.ref.DeliveryID] {
			continue
		}
		s.known[j.ref.DeliveryID] = true
		_, e := s.enter(j)
		e.jobs = append(e.jobs, j)
	}
	s.start()
}

// enter takes a job's brand and endpoint into the turns, making their
// queues if they have none (s.mu held).
func (s *scheduler) enter(j job) (*brandQueue, *endpointQueue) {
	b := s.brands[j.ref.BrandID]
	if b == nil {
		b = &brandQueue{id: j.ref.BrandID, endpoints: map[string]*endpointQueue{}}
		s.brands[b.id] = b
		s.ring = append(s.ring, b)
	}
	e := b.endpoints[j.endpoint]
	if e == nil {
		key := j.ref.BrandID + "/" + j.endpoint
		e = &endpointQueue{key: key, limit: max(s.limits[key], 1)}
		b.endpoints[j.endpoint] = e
		b.ring = append(b.ring, e)
	}
	return b, e
}

// reserve counts a job the caller runs itself as under way, if the limits
// allow it to start now; done must then be called with its outcome once
// it is recorded. It fails when the job is queued or under way already,
// or would have to wait: the caller queues it instead (add).
func (s *scheduler) reserve(j job) (done func(outcome), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.known[j.ref.DeliveryID] || s.inFlight >= s.limit {
		return nil, false
	}
	b, e := s.enter(j)
	if b.inFlight >= s.brandLimit || e.inFlight >= e.limit {
		s.leaveIfIdle(b, e, j.endpoint)
		return nil, false
	}
	s.known[j.ref.DeliveryID] = true
	s.inFlight++
	b.inFlight++
	e.inFlight++
	s.wg.Add(1)
	return func(out outcome) {
		s.finish(b, e, j, out)
		s.wg.Done()
	}, true
}

// has reports whether a delivery is queued or under way.
func (s *scheduler) has(deliveryID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.known[deliveryID]
}

// queued counts the deliveries queued or under way.
func (s *scheduler) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.known)
}

// start runs the next jobs in turn while the limits allow (s.mu held).
func (s *scheduler) start() {
	for !s.closed && s.inFlight < s.limit {
		b, e, ok := s.pick()
		if !ok {
			return
		}
		j := e.jobs[0]
		e.jobs = e.jobs[1:]
		s.inFlight++
		b.inFlight++
		e.inFlight++
		s.wg.Go(func() { s.finish(b, e, j, s.run(j)) })
	}
}

// pick finds the next brand in turn with an endpoint that may start an
// attempt, and that endpoint.
func (s *scheduler) pick() (*brandQueue, *endpointQueue, bool) {
	for i := range s.ring {
		b := s.ring[(s.next+i)%len(s.ring)]
		if b.inFlight >= s.brandLimit {
			continue
		}
		for k := range b.ring {
			e := b.ring[(b.next+k)%len(b.ring)]
			if len(e.jobs) > 0 && e.inFlight < e.limit {
				b.next = (b.next + k + 1) % len(b.ring)
				s.next = (s.next + i + 1) % len(s.ring)
				return b, e, true
			}
		}
	}
	return nil, nil, false
}

func (s *scheduler) finish(b *brandQueue, e *endpointQueue, j job, out outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.known, j.ref.DeliveryID)
	s.inFlight--
	b.inFlight--
	e.inFlight--
	switch out {
	case quick:
		e.limit = min(e.limit*2, endpointMaxInFlight)
	case slow:
		e.limit = 1
	}
	s.leaveIfIdle(b, e, j.endpoint)
	s.start()
}

// leaveIfIdle takes an endpoint with nothing left out of the turns (its
// limit is kept), and a brand without endpoints (s.mu held).
func (s *scheduler) leaveIfIdle(b *brandQueue, e *endpointQueue, endpoint string) {
	if len(e.jobs) == 0 && e.inFlight == 0 {
		s.limits[e.key] = e.limit
		delete(b.endpoints, endpoint)
		b.ring, b.next = leave(b.ring, b.next, e)
	}
	if len(b.ring) == 0 {
		delete(s.brands, b.id)
		s.ring, s.next = leave(s.ring, s.next, b)
	}
}

// leave takes x out of a ring whose turn is at next, keeping the turn.
func leave[T comparable](ring []T, next int, x T) ([]T, int) {
	i := slices.Index(ring, x)
	ring = slices.Delete(ring, i, i+1)
	if i < next {
		next--
	}
	if next >= len(ring) {
		next = 0
	}
	return ring, next
}

// close starts nothing more and waits for the attempts under way.
func (s *scheduler) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
}
