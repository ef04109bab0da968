package members

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// hkdfRef is RFC 5869 written out with HMAC, independent of crypto/hkdf,
// for keys of up to one SHA-256 block per round.
func hkdfRef(ikm, salt []byte, info string, n int) []byte {
	if salt == nil {
		salt = make([]byte, sha256.Size)
	}
	ext := hmac.New(sha256.New, salt)
	ext.Write(ikm)
	prk := ext.Sum(nil)
	var okm, prev []byte
	for i := byte(1); len(okm) < n; i++ {
		h := hmac.New(sha256.New, prk)
		h.Write(prev)
		h.Write([]byte(info))
		h.Write([]byte{i})
		prev = h.Sum(nil)
		okm = append(okm, prev...)
	}
	return okm[:n]
}

func TestHKDFReference(t *testing.T) {
	// RFC 5869 A.3: SHA-256, zero-length salt and info.
	got := hkdfRef(bytes.Repeat([]byte{0x0b}, 22), nil, "", 42)
	want := "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
	if hex.EncodeToString(got) != want {
		t.Fatalf("reference HKDF %x, want %s", got, want)
	}
}

func TestDeriveKey(t *testing.T) {
	s1 := Secret("0123456789abcdef0123456789abcdef")
	s2 := Secret("0123456789abcdef0123456789abcdeF")
	k1, err := DeriveKey(s1)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := DeriveKey(s1)
	if k1 != again {
		t.Error("same secret, different keys")
	}
	k2, _ := DeriveKey(s2)
	if k1 == k2 {
		t.Error("secrets differing in one bit gave the same key")
	}
	if want := hkdfRef(s1, nil, "herald memberlist v1", 32); !bytes.Equal(k1[:], want) {
		t.Errorf("key is not HKDF-SHA256(secret, no salt, %q)", keyInfo)
	}
	if bytes.Contains(k1[:], s1[:16]) {
		t.Error("key contains the secret")
	}
	for _, bad := range []Secret{nil, {}, Secret("fifteen bytes!!")} {
		_, err := DeriveKey(bad)
		if err == nil {
			t.Errorf("DeriveKey accepted a %d-byte secret", len(bad))
			continue
		}
		if len(bad) > 0 && strings.Contains(err.Error(), string(bad)) {
			t.Errorf("error %q shows the secret", err)
		}
	}
	if _, err := DeriveKey(Secret(strings.Repeat("x", 16))); err != nil {
		t.Errorf("16-byte secret refused: %v", err)
	}
}

func TestRedaction(t *testing.T) {
	secret := Secret("super-secret-material-0123456789")
	key, err := DeriveKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{NodeName: "node1", Secret: secret}
	leaks := func(s string) bool {
		return strings.Contains(s, "super-secret") ||
			strings.Contains(s, hex.EncodeToString(secret)[:16]) ||
			strings.Contains(s, hex.EncodeToString(key[:])[:16]) ||
			strings.Contains(s, fmt.Sprint([]byte(secret)[:4])[1:8]) ||
			strings.Contains(s, fmt.Sprint(key[:4])[1:8])
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%o", "%b"} {
		for name, v := range map[string]any{"secret": secret, "key": key, "config": cfg, "*config": &cfg} {
			if s := fmt.Sprintf(verb, v); leaks(s) {
				t.Errorf("%s of %s leaks: %s", verb, name, s)
			}
		}
	}
	b, err := json.Marshal(struct {
		S Secret
		K Key
	}{secret, key})
	if err != nil || leaks(string(b)) {
		t.Errorf("JSON leaks or fails: %s %v", b, err)
	}
	var buf bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&buf, nil), slog.NewJSONHandler(&buf, nil)} {
		slog.New(h).Info("x", "secret", secret, "key", key, "config", cfg)
	}
	if leaks(buf.String()) {
		t.Errorf("slog leaks: %s", buf.String())
	}
	if !strings.Contains(buf.String(), redacted) {
		t.Errorf("slog output does not say %s: %s", redacted, buf.String())
	}
}

func TestKeysFromSecret(t *testing.T) {
	long := func(c byte) []byte { return bytes.Repeat([]byte{c}, MinSecretLen) }
	p, extra, err := KeysFromSecret(map[string][]byte{"secretkey": long('a'), "secretkey-old": long('c'), "secretkey-next": long('b'), "other": []byte("x")}, "secretkey")
	if err != nil || string(p) != string(long('a')) || len(extra) != 2 || string(extra[0]) != string(long('b')) || string(extra[1]) != string(long('c')) {
		t.Errorf("got %d extra, err %v", len(extra), err)
	}
	for name, data := range map[string]map[string][]byte{
		"no primary":    {"secretkey-next": long('b')},
		"short primary": {"secretkey": []byte("short")},
		"short extra":   {"secretkey": long('a'), "secretkey-next": []byte("short")},
	} {
		if _, _, err := KeysFromSecret(data, "secretkey"); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), string(long('a'))) {
			t.Errorf("%s: the error shows key material: %v", name, err)
		}
	}
}
