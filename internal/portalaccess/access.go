// Package portalaccess keeps the partner portal's sign-ins: invitations
// a brand sends a partner, the password the partner sets with one, and
// the sessions it signs in to. It shares its secrets' handling with the
// dashboard's users (package accounts): passwords hashed by the
// accounts.Passwords passed in, tokens stored by their hash.
//
// One e-mail address may be a partner of several brands, each of which
// invites it: each invitation sets a password for that partner alone, so
// that no brand's invitation can open another brand's portal. Signing in
// with the address opens the partner whose password it is.
package portalaccess

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// Service keeps invitations, partners' portal passwords and sessions.
type Service struct {
	db          *records.DB
	partners    partnerReader
	brands      brands
	passwords   accounts.Passwords
	unknownHash func() string
}

// partnerReader reads the partner an invitation or session is for.
type partnerReader interface {
	Partner(ctx context.Context, brandID, partnerID string) (tally.Partner, error)
}

// brands names the brand whose portal a partner signs in to.
type brands interface {
	Brand(ctx context.Context, brandID string) (tally.Brand, error)
}

// New returns the Service over db. passwords hashes the partners'
// passwords (password.Argon2id); it may be nil where the Service only
// invites (the API's partner routes), which never hashes.
func New(db *records.DB, p partnerReader, b brands, passwords accounts.Passwords) *Service {
	s := &Service{db: db, partners: p, brands: b, passwords: passwords}
	if passwords != nil {
		s.unknownHash = accounts.UnknownUserHash(passwords)
	}
	return s
}

// InviteTTL is how long an invitation link works.
const InviteTTL = 7 * 24 * time.Hour

// invitation is the stored form of an invitation, found by its token's
// hash.
type invitation struct {
	BrandID   string     `json:"brandId"`
	PartnerID string     `json:"partnerId"`
	CreatedAt tally.Time `json:"createdAt"`
	ExpiresAt tally.Time `json:"expiresAt"`
}

// Invite is a new invitation: its token, shown once, and its expiry.
type Invite struct {
	Token     string
	ExpiresAt tally.Time
}

// Invite makes an invitation to the portal for one of the brand's active
// partners. Each invitation works once, and only while it is the
// partner's latest; a partner that signed in already and is invited again
// sets a new password with it, which ends its earlier sessions.
func (s *Service) Invite(ctx context.Context, brandID, partnerID string) (Invite, error) {
	p, err := s.partners.Partner(ctx, brandID, partnerID)
	if err != nil {
		return Invite{}, err
	}
	if p.Status != tally.PartnerActive {
		return Invite{}, tally.Errorf(tally.ECodeInvalidTransition, "Only an active partner can be invited to the portal; partner %q is %s.", partnerID, p.Status)
	}
	token, err := accounts.NewToken()
	if err != nil {
		return Invite{}, err
	}
	now := s.db.Now()
	inv := invitation{BrandID: brandID, PartnerID: partnerID, CreatedAt: tally.NewTime(now), ExpiresAt: tally.NewTime(now.Add(InviteTTL))}
	hash := identity.Hash(token)
	err = s.db.Transact(ctx, append([]store.Op{
		store.Put(store.Item{Key: keys.PortalInvite(hash), Data: records.MustJSON(inv), ExpiresAt: inv.ExpiresAt.Unix()}, store.NotExists()),
		store.Put(store.Item{Key: keys.PortalLatestInvite(brandID, partnerID), Data: records.MustJSON(latestInvite{TokenHash: hash}), ExpiresAt: inv.ExpiresAt.Unix()}),
	}, audit.Record(ctx, brandID, audit.PartnerInvited, partnerID, "portal invitation for "+p.Name+" <"+p.Email+">", now)...)...)
	return Invite{Token: token, ExpiresAt: inv.ExpiresAt}, err
}

// latestInvite names a partner's latest invitation, the only one of its
// invitations that works.
type latestInvite struct {
	TokenHash string `json:"tokenHash"`
}

// errInvitation answers an unknown, used or expired invitation, or one
// whose partner is no longer active.
var errInvitation = tally.Errorf(tally.ECodeNotFound, "This invitation link does not work: it was used already or it expired. Ask the brand for a new one.")

// Invited is what an invitation is for, to show on its page.
type Invited struct {
	Partner   tally.Partner
	BrandName string
	ExpiresAt tally.Time
}

// Invitation returns what a working invitation is for.
func (s *Service) Invitation(ctx context.Context, token string) (Invited, error) {
	inv, err := s.invitation(ctx, token)
	if err != nil {
		return Invited{}, err
	}
	p, err := s.activePartner(ctx, inv.BrandID, inv.PartnerID)
	if err != nil {
		return Invited{}, err
	}
	b, err := s.brands.Brand(ctx, inv.BrandID)
	return Invited{Partner: p, BrandName: b.Name, ExpiresAt: inv.ExpiresAt}, err
}

func (s *Service) invitation(ctx context.Context, token string) (invitation, error) {
	inv, found, err := accounts.GetByToken(ctx, s.db, keys.PortalInvite, token, func(i invitation) tally.Time { return i.ExpiresAt })
	switch {
	case err != nil:
		return invitation{}, err
	case !found:
		return invitation{}, errInvitation
	}
	// Only the partner's latest invitation works: a brand that invites
	// again (the first link did not arrive) spends the earlier links.
	switch latest, err := records.Get[latestInvite](ctx, s.db, keys.PortalLatestInvite(inv.BrandID, inv.PartnerID)); {
	case errors.Is(err, store.ErrNotFound) || (err == nil && latest.TokenHash != identity.Hash(token)):
		return invitation{}, errInvitation
	case err != nil:
		return invitation{}, err
	}
	return inv, nil
}

// activePartner reads a partner, refusing one that is not active with
// errInvitation's not found.
func (s *Service) activePartner(ctx context.Context, brandID, partnerID string) (tally.Partner, error) {
	p, err := s.partners.Partner(ctx, brandID, partnerID)
	if tally.ErrorCode(err) == tally.ECodeNotFound || (err == nil && p.Status != tally.PartnerActive) {
		return tally.Partner{}, errInvitation
	}
	return p, err
}

// login is a partner's portal password, found by its application's
// e-mail address (lower-cased), brand and partner.
type login struct {
	BrandID      string     `json:"brandId"`
	PartnerID    string     `json:"partnerId"`
	PasswordHash string     `json:"passwordHash"`
	UpdatedAt    tally.Time `json:"updatedAt"`
}

// AcceptInvite sets the invited partner's password and signs it in,
// returning the new session's token. The invitation is used up in the
// same write, so of two requests with one invitation only one sets a
// password.
func (s *Service) AcceptInvite(ctx context.Context, token, password string) (string, Session, error) {
	inv, err := s.invitation(ctx, token)
	if err != nil {
		return "", Session{}, err
	}
	if err := accounts.CheckPassword(&password); err != nil {
		return "", Session{}, err
	}
	p, err := s.activePartner(ctx, inv.BrandID, inv.PartnerID)
	if err != nil {
		return "", Session{}, err
	}
	hash, err := s.passwords.Hash(password)
	if err != nil {
		return "", Session{}, err
	}
	l := login{BrandID: p.BrandID, PartnerID: p.ID, PasswordHash: hash, UpdatedAt: tally.NewTime(s.db.Now())}
	err = s.db.Transact(ctx,
		store.Delete(keys.PortalInvite(identity.Hash(token)), store.Exists()),
		store.Put(store.Item{Key: keys.PortalLogin(emailKey(p.Email), p.BrandID, p.ID), Data: records.MustJSON(l)}),
	)
	if _, failed := store.FailedOp(err); failed {
		return "", Session{}, errInvitation
	}
	if err != nil {
		return "", Session{}, err
	}
	return s.startSession(ctx, p)
}

func emailKey(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// maxLogins bounds the brands one address's password is checked against
// at sign-in: each check costs tens of milliseconds.
const maxLogins = 10

// errSignIn is the one answer to a wrong address or password, so that it
// tells nothing about which addresses are partners.
var errSignIn = tally.Errorf(tally.ECodeUnauthorized, "The email or password is not right.")

// errNotActive answers the right password of a partner that is no longer
// active: it has proved who it is, and is told why it cannot go on.
var errNotActive = tally.Errorf(tally.ECodeUnauthorized, "Your partnership with this brand is not active. Ask the brand about it.")

// SignIn checks a partner's e-mail address and password and starts a
// session, returning its token. The password is checked against the
// address's passwords at each brand, in the order of the brands' ids; the
// first that matches an active partner opens. Throttling attempts is the
// caller's part (it knows the client's address).
func (s *Service) SignIn(ctx context.Context, email, password string) (string, Session, error) {
	email = emailKey(email)
	var logins []login
	if email != "" && len(email) <= 254 && len(password) <= 1024 {
		page, err := s.db.Query(ctx, store.Query{PK: keys.PortalLoginsPK(email), Limit: maxLogins})
		if err != nil {
			return "", Session{}, err
		}
		for _, it := range page.Items {
			var l login
			if err := records.Decode(it, &l); err != nil {
				return "", Session{}, err
			}
			logins = append(logins, l)
		}
	}
	if len(logins) == 0 { // as long as a wrong password
		if _, err := s.passwords.Verify(s.unknownHash(), password); err != nil {
			return "", Session{}, err
		}
		return "", Session{}, errSignIn
	}
	refusal := errSignIn
	for _, l := range logins {
		ok, err := s.passwords.Verify(l.PasswordHash, password)
		if err != nil {
			return "", Session{}, err
		}
		if !ok {
			continue
		}
		p, err := s.partners.Partner(ctx, l.BrandID, l.PartnerID)
		switch {
		case tally.ErrorCode(err) == tally.ECodeNotFound:
			continue
		case err != nil:
			return "", Session{}, err
		case p.Status != tally.PartnerActive:
			refusal = errNotActive
			continue
		}
		return s.startSession(ctx, p)
	}
	return "", Session{}, refusal
}

// SessionTTL is how long a portal session lasts after sign-in, as long
// as a dashboard session.
const SessionTTL = accounts.SessionTTL

// Session is a signed-in partner's server-side session. Only a hash of its
// token is stored; the token itself lives in the partner's cookie.
type Session struct {
	BrandID     string     `json:"brandId"`
	BrandName   string     `json:"brandName"`
	PartnerID   string     `json:"partnerId"`
	PartnerName string     `json:"partnerName"`
	Email       string     `json:"email"`
	CreatedAt   tally.Time `json:"createdAt"`
	ExpiresAt   tally.Time `json:"expiresAt"`
}

func (s *Service) startSession(ctx context.Context, p tally.Partner) (string, Session, error) {
	token, err := accounts.NewToken()
	if err != nil {
		return "", Session{}, err
	}
	b, err := s.brands.Brand(ctx, p.BrandID)
	if err != nil {
		return "", Session{}, err
	}
	now := s.db.Now()
	sess := Session{BrandID: p.BrandID, BrandName: b.Name, PartnerID: p.ID, PartnerName: p.Name, Email: p.Email,
		CreatedAt: tally.NewTime(now), ExpiresAt: tally.NewTime(now.Add(SessionTTL))}
	err = accounts.PutSecret(ctx, s.db, keys.PortalSession(identity.Hash(token)), sess, sess.ExpiresAt)
	return token, sess, err
}

// errNoSession answers a missing, unknown, expired or ended session.
var errNoSession = tally.Errorf(tally.ECodeUnauthorized, "Sign in to continue.")

// Session returns the live session of a token. A session whose partner
// is no longer active (banned, rejected) ends here, at its next request.
func (s *Service) Session(ctx context.Context, token string) (Session, error) {
	sess, found, err := accounts.GetByToken(ctx, s.db, keys.PortalSession, token, func(s Session) tally.Time { return s.ExpiresAt })
	switch {
	case err != nil:
		return Session{}, err
	case !found:
		return Session{}, errNoSession
	}
	p, err := s.partners.Partner(ctx, sess.BrandID, sess.PartnerID)
	switch {
	case tally.ErrorCode(err) == tally.ECodeNotFound || (err == nil && p.Status != tally.PartnerActive):
		if err := s.EndSession(ctx, token); err != nil {
			return Session{}, err
		}
		return Session{}, errNotActive
	case err != nil:
		return Session{}, err
	case sess.CreatedAt.Before(p.UpdatedAt.Time):
		// The partner's status changed since the session began (a ban
		// and a reinstatement with no request between): it has ended.
		return Session{}, s.endedSession(ctx, token)
	}
	// A password set since the session began (a later invitation) ends it.
	l, err := records.Get[login](ctx, s.db, keys.PortalLogin(emailKey(sess.Email), sess.BrandID, sess.PartnerID))
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && sess.CreatedAt.Before(l.UpdatedAt.Time)):
		return Session{}, s.endedSession(ctx, token)
	case err != nil:
		return Session{}, err
	}
	sess.PartnerName = p.Name
	return sess, nil
}

// endedSession deletes a session that has ended and answers errNoSession.
func (s *Service) endedSession(ctx context.Context, token string) error {
	if err := s.EndSession(ctx, token); err != nil {
		return err
	}
	return errNoSession
}

// EndSession signs a session out; ending an unknown one is not an error.
func (s *Service) EndSession(ctx context.Context, token string) error {
	hash, ok := accounts.TokenHash(token)
	if !ok {
		return nil
	}
	return s.db.Transact(ctx, store.Delete(keys.PortalSession(hash)))
}
