package dynamo

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tally-hq/tally/internal/store"
)

// cursor is the opaque continuation of a query: the DynamoDB key at which
// the previous page stopped (the table key, plus the index key on an index)
// and the index it was read from.
type cursor struct {
	Index store.Index       `json:"ix"`
	Key   map[string]string `json:"k"`
}

// encodeCursor continues after it, the last item of a page read from ix.
func encodeCursor(ix store.Index, it store.Item) string {
	key := map[string]string{attrPK: it.PK, attrSK: it.SK}
	if ix != store.Table {
		pk, sk := keyAttrs(ix)
		k := it.IndexKey(ix)
		key[pk], key[sk] = k.PK, k.SK
	}
	return encode(cursor{Index: ix, Key: key})
}

// encodeKeyCursor continues after a LastEvaluatedKey of a query on ix.
func encodeKeyCursor(ix store.Index, lek map[string]types.AttributeValue) (string, error) {
	key := make(map[string]string, len(lek))
	for name, v := range lek {
		s, err := asString(name, v)
		if err != nil {
			return "", fmt.Errorf("dynamo: last evaluated key: %w", err)
		}
		key[name] = s
	}
	return encode(cursor{Index: ix, Key: key}), nil
}

func encode(c cursor) string {
	b, _ := json.Marshal(c) // cannot fail: strings only
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor returns the ExclusiveStartKey for q.Cursor, or
// store.ErrInvalidCursor unless the cursor names a key that the very same
// query could have stopped at: same index, same partition, a sort key
// within the query's range. Checking this here turns a foreign cursor into
// ErrInvalidCursor rather than into a DynamoDB ValidationException or,
// worse, a silently wrong page.
func decodeCursor(q store.Query) (map[string]types.AttributeValue, error) {
	b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
	if err != nil {
		return nil, store.ErrInvalidCursor
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil || c.Index != q.Index {
		return nil, store.ErrInvalidCursor
	}
	names := []string{attrPK, attrSK}
	pkAttr, skAttr := keyAttrs(q.Index)
	if q.Index != store.Table {
		names = append(names, pkAttr, skAttr)
	}
	if len(c.Key) != len(names) || c.Key[pkAttr] != q.PK || !inRange(q, c.Key[skAttr]) {
		return nil, store.ErrInvalidCursor
	}
	key := make(map[string]types.AttributeValue, len(names))
	for _, name := range names {
		v, ok := c.Key[name]
		if !ok || v == "" {
			return nil, store.ErrInvalidCursor
		}
		key[name] = str(v)
	}
	return key, nil
}

// inRange reports whether sort key sk satisfies q's sort key condition.
func inRange(q store.Query, sk string) bool {
	return strings.HasPrefix(sk, q.SKPrefix) &&
		(q.SKFrom == "" || sk >= q.SKFrom) &&
		(q.SKTo == "" || sk <= q.SKTo)
}
