package dynamo_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// Every item packed with the first dictionary needs exactly it to be read.
func TestDictionaryNeverChanges(t *testing.T) {
	b, err := os.ReadFile("dict1.json")
	if err != nil {
		t.Fatal(err)
	}
	const want = "f95e73f62a9e64a79acf4ecb031706ea4bca572f97798bd6c728d2ed2866f0dd"
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != want {
		t.Fatalf("dict1.json changed (sha256 %x): items packed with it would not read; add a dictionary with its own version byte instead", sum)
	}
}

// A record is stored in fewer bytes than its JSON, in the table, in each
// index entry and in the stream, and reads back as written; what does not
// get shorter, and data written unpacked, read as they are.
func TestDataIsStoredPacked(t *testing.T) {
	client, table := dynamotest.NewTable(t)
	s := dynamo.New(client, table)
	ctx := context.Background()
	conversion := []byte(`{"id":"cnv_01m8h6by19ng321ktrw9yg2srp","brandId":"brd_01m8h6br3k4k1nmdky3a0p6vnz","offerId":"off_01m8h6bw4g6zrsnme9da2yyyke","partnerId":"prt_01m8h6bw5vffnhhf95pbj964h3","revenueCents":8990,"payoutCents":1500,"currency":"EUR","status":"approved","sub1":"newsletter-nov","sub2":"","sub3":"","sub4":"","sub5":"","externalTxnId":"order-6","approveAt":null,"approvedAt":"2027-03-02T08:13:57.737Z","createdAt":"2027-03-02T08:13:57.737Z","updatedAt":"2027-03-02T08:13:57.737Z"}`)
	random := make([]byte, 300)
	rand.Read(random)
	versionFirst := slices.Concat([]byte{1}, random) // what packed data begins with
	for name, data := range map[string][]byte{"conversion": conversion, "random bytes": random, "empty": {}, "the version byte first": versionFirst} {
		t.Run(name, func(t *testing.T) {
			it := store.Item{Key: store.Key{PK: "P#" + name, SK: "S"}, GSI1: store.IndexKey{PK: "G#" + name, SK: "S"}, Data: data}
			if err := s.Transact(ctx, store.Put(it)); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, it.Key)
			if err != nil || !bytes.Equal(got.Data, data) {
				t.Fatalf("Get = %q, %v; want %q", got.Data, err, data)
			}
			page, err := s.Query(ctx, store.Query{Index: store.GSI1, PK: it.GSI1.PK})
			if err != nil || len(page.Items) != 1 || !bytes.Equal(page.Items[0].Data, data) {
				t.Fatalf("Query(gsi1) = %v, %v; want the item's data", page.Items, err)
			}
			raw := rawData(t, client, table, it.Key)
			if name == "conversion" && len(raw) > len(data)*2/5 {
				t.Errorf("a conversion of %d bytes is stored in %d, want at most 40 %%", len(data), len(raw))
			}
			if name != "the version byte first" && len(raw) > len(data) {
				t.Errorf("%d bytes are stored in %d", len(data), len(raw))
			}
		})
	}
	t.Run("written unpacked", func(t *testing.T) {
		key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "OLD"}, "sk": &types.AttributeValueMemberS{Value: "S"}}
		item := map[string]types.AttributeValue{"data": &types.AttributeValueMemberB{Value: conversion}}
		for k, v := range key {
			item[k] = v
		}
		if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, store.Key{PK: "OLD", SK: "S"})
		if err != nil || !bytes.Equal(got.Data, conversion) {
			t.Fatalf("Get = %q, %v; want %q", got.Data, err, conversion)
		}
	})
}

func rawData(t *testing.T, client *dynamodb.Client, table string, k store.Key) []byte {
	t.Helper()
	out, err := client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: k.PK}, "sk": &types.AttributeValueMemberS{Value: k.SK}}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := out.Item["data"].(*types.AttributeValueMemberB)
	if b == nil {
		return nil
	}
	return b.Value
}

func BenchmarkPackedData(b *testing.B) {
	data := []byte(`{"id":"cnv_01m8h6by19ng321ktrw9yg2srp","brandId":"brd_01m8h6br3k4k1nmdky3a0p6vnz","offerId":"off_01m8h6bw4g6zrsnme9da2yyyke","partnerId":"prt_01m8h6bw5vffnhhf95pbj964h3","revenueCents":8990,"payoutCents":1500,"currency":"EUR","status":"approved","sub1":"newsletter-nov","sub2":"","sub3":"","sub4":"","sub5":"","externalTxnId":"order-6","approveAt":null,"approvedAt":"2027-03-02T08:13:57.737Z","createdAt":"2027-03-02T08:13:57.737Z","updatedAt":"2027-03-02T08:13:57.737Z"}`)
	packed := dynamo.PackData(data)
	b.Run("pack", func(b *testing.B) {
		for b.Loop() {
			dynamo.PackData(data)
		}
	})
	b.Run("unpack", func(b *testing.B) {
		for b.Loop() {
			if _, err := dynamo.UnpackData(packed); err != nil {
				b.Fatal(err)
			}
		}
	})
}
