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
// cost no worker that others need. An endpoint with a pace
// (maxPerSecond) starts its attempts no faster: its queue waits its time
// while the others take their turns, so its backlog delays no one else.
type scheduler struct {
	limit, brandLimit int
	run               func(job) outcome

	mu       sync.Mutex
	known    map[string]bool      // deliveries queued or under way
	limits   map[string]int       // brand/endpoint → its in-flight limit, kept while idle
	paces    map[string]int       // brand/endpoint → its maxPerSecond, as last read
	nexts    map[string]time.Time // brand/endpoint → when a paced one may start next, kept while idle
	timer    *time.Timer          // wakes start when a paced endpoint's time comes
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
	pace     int       // attempts a second at most, 0: no pace
	next     time.Time // with a pace, when the next attempt may start
}

// ready says whether the endpoint's pace lets an attempt start at now.
func (e *endpointQueue) ready(now time.Time) bool { return e.pace == 0 || !now.Before(e.next) }

// started takes an attempt started at now from the endpoint's pace. An
// attempt that a timer (or a busy machine) started late leaves the next on
// time, catching up at most paceCatchUp, so the pace holds on average
// without bursts beyond a twentieth of a second's worth.
func (e *endpointQueue) started(now time.Time) {
	if e.pace == 0 {
		return
	}
	interval := time.Second / time.Duration(e.pace)
	base := e.next
	if late := max(paceCatchUp, interval); now.Sub(base) > late {
		base = now.Add(-late)
	}
	e.next = base.Add(interval)
}

// paceCatchUp is how far behind its pace a paced endpoint may catch up.
const paceCatchUp = 50 * time.Millisecond

func newScheduler(limit, brandLimit int, run func(job) outcome) *scheduler {
	return &scheduler{limit: limit, brandLimit: brandLimit, run: run, known: map[string]bool{}, limits: map[string]int{},
		paces: map[string]int{}, nexts: map[string]time.Time{}, brands: map[string]*brandQueue{}}
}

// setPace sets an endpoint's maxPerSecond (0: none), as read from it.
func (s *scheduler) setPace(brandID, endpoint string, perSecond int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := brandID + "/" + endpoint
	if s.paces[key] == perSecond {
		return
	}
	if perSecond == 0 {
		delete(s.paces, key)
		delete(s.nexts, key)
	} else {
		s.paces[key] = perSecond
	}
	if b := s.brands[brandID]; b != nil {
		if e := b.endpoints[endpoint]; e != nil {
			e.pace = perSecond
			s.start()
		}
	}
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
		e = &endpointQueue{key: key, limit: max(s.limits[key], 1), pace: s.paces[key], next: s.nexts[key]}
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
	now := time.Now()
	if b.inFlight >= s.brandLimit || e.inFlight >= e.limit || !e.ready(now) {
		s.leaveIfIdle(b, e, j.endpoint)
		return nil, false
	}
	e.started(now)
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

// start runs the next jobs in turn while the limits allow, and sets the
// timer for the paced endpoints that wait only for their time (s.mu held).
func (s *scheduler) start() {
	now := time.Now()
	for !s.closed && s.inFlight < s.limit {
		b, e, ok := s.pick(now)
		if !ok {
			s.wakeForPaced(now)
			return
		}
		e.started(now)
		j := e.jobs[0]
		e.jobs = e.jobs[1:]
		s.inFlight++
		b.inFlight++
		e.inFlight++
		s.wg.Go(func() { s.finish(b, e, j, s.run(j)) })
	}
}

// wakeForPaced sets the timer to start again when the first paced
// endpoint that waits only for its time may start (s.mu held).
func (s *scheduler) wakeForPaced(now time.Time) {
	var at time.Time
	for _, b := range s.ring {
		if b.inFlight >= s.brandLimit {
			continue
		}
		for _, e := range b.ring {
			if len(e.jobs) > 0 && e.inFlight < e.limit && !e.ready(now) && (at.IsZero() || e.next.Before(at)) {
				at = e.next
			}
		}
	}
	if at.IsZero() {
		return
	}
	if s.timer == nil {
		s.timer = time.AfterFunc(at.Sub(now), func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.start()
		})
		return
	}
	s.timer.Reset(at.Sub(now))
}

// pick finds the next brand in turn with an endpoint that may start an
// attempt at now, and that endpoint.
func (s *scheduler) pick(now time.Time) (*brandQueue, *endpointQueue, bool) {
	for i := range s.ring {
		b := s.ring[(s.next+i)%len(s.ring)]
		if b.inFlight >= s.brandLimit {
			continue
		}
		for k := range b.ring {
			e := b.ring[(b.next+k)%len(b.ring)]
			if len(e.jobs) > 0 && e.inFlight < e.limit && e.ready(now) {
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
		if e.pace > 0 {
			s.nexts[e.key] = e.next
		}
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
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
