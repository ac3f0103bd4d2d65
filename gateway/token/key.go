package token

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

const (
	// MaxKeyFileSize is the largest key file LoadKey and LoadSigningKey
	// read, in bytes (64 KiB).
	MaxKeyFileSize = 64 << 10

	// MinHMACSecretLength is the shortest accepted HS256/HS384/HS512 secret,
	// in bytes (32, i.e. 256 bits; RFC 7518 section 3.2 requires a key at
	// least as long as the hash output for HS256).
	MinHMACSecretLength = 32

	// MinRSABits is the smallest accepted RSA modulus, in bits (2048,
	// RFC 7518 section 3.3 and 3.5).
	MinRSABits = 2048

	// maxKeyIDLength bounds Key.ID / SigningKey.ID, in bytes.
	maxKeyIDLength = 256
)

type family int

const (
	familyHMAC family = iota + 1
	familyEd25519
	familyRSA
	familyECDSA
)

type algInfo struct {
	family family
	curve  elliptic.Curve // familyECDSA only
	method jwt.SigningMethod
}

// algorithms lists every accepted JWS "alg" value (RFC 7518 section 3.1,
// RFC 8037 section 3.1 for EdDSA). "none" is deliberately absent.
var algorithms = map[string]algInfo{
	"HS256": {familyHMAC, nil, jwt.SigningMethodHS256},
	"HS384": {familyHMAC, nil, jwt.SigningMethodHS384},
	"HS512": {familyHMAC, nil, jwt.SigningMethodHS512},
	"EdDSA": {familyEd25519, nil, jwt.SigningMethodEdDSA},
	"RS256": {familyRSA, nil, jwt.SigningMethodRS256},
	"RS384": {familyRSA, nil, jwt.SigningMethodRS384},
	"RS512": {familyRSA, nil, jwt.SigningMethodRS512},
	"PS256": {familyRSA, nil, jwt.SigningMethodPS256},
	"PS384": {familyRSA, nil, jwt.SigningMethodPS384},
	"PS512": {familyRSA, nil, jwt.SigningMethodPS512},
	"ES256": {familyECDSA, elliptic.P256(), jwt.SigningMethodES256},
	"ES384": {familyECDSA, elliptic.P384(), jwt.SigningMethodES384},
	"ES512": {familyECDSA, elliptic.P521(), jwt.SigningMethodES512},
}

// Key is one verification key of a Verifier.
//
// ID is the JWS "kid" header value that selects the key (1..256 bytes).
// Algorithm is the JWS "alg" name the key is pinned to: HS256, HS384, HS512,
// EdDSA, RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384 or ES512.
// The verification material (the HMAC secret or the public key) is
// unexported; obtain a Key from LoadKey or SigningKey.Public. Formatting a
// Key with any fmt verb prints only ID and Algorithm.
type Key struct {
	// ID is the "kid" this key answers to.
	ID string
	// Algorithm is the JWS "alg" this key is pinned to.
	Algorithm string

	material any // []byte (HMAC) or ed25519.PublicKey, *rsa.PublicKey, *ecdsa.PublicKey
}

// SigningKey is a key that can mint tokens (see Mint). ID and Algorithm are
// as for Key. The material (HMAC secret or private key) is unexported;
// obtain one from LoadSigningKey. Formatting a SigningKey with any fmt verb
// prints only ID and Algorithm.
type SigningKey struct {
	// ID is the "kid" written into minted tokens.
	ID string
	// Algorithm is the JWS "alg" used to sign.
	Algorithm string

	material any // []byte (HMAC) or ed25519.PrivateKey, *rsa.PrivateKey, *ecdsa.PrivateKey
}

// String returns "token.Key{ID:…, Algorithm:…}", never key material.
func (k Key) String() string {
	return fmt.Sprintf("token.Key{ID:%q, Algorithm:%q}", k.ID, k.Algorithm)
}

// Format implements fmt.Formatter so that no verb (%v, %+v, %#v, %x, …)
// can print the verification material; every verb prints String().
func (k Key) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.String()) }

// String returns "token.SigningKey{ID:…, Algorithm:…}", never key material.
func (k SigningKey) String() string {
	return fmt.Sprintf("token.SigningKey{ID:%q, Algorithm:%q}", k.ID, k.Algorithm)
}

// Format implements fmt.Formatter so that no verb can print the secret or
// private key; every verb prints String().
func (k SigningKey) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.String()) }

// Public returns the verification Key matching k: same ID and Algorithm, with
// the public key (asymmetric algorithms) or a copy of the secret (HMAC).
// It returns a zero Key if k holds no material (a zero SigningKey).
func (k SigningKey) Public() Key {
	switch m := k.material.(type) {
	case []byte:
		return Key{ID: k.ID, Algorithm: k.Algorithm, material: bytes.Clone(m)}
	case crypto.Signer:
		return Key{ID: k.ID, Algorithm: k.Algorithm, material: m.Public()}
	default:
		return Key{}
	}
}

// LoadKey reads a verification key for algorithm from the file at path and
// returns it as a Key with the given id (the "kid").
//
// File formats:
//   - HS256/HS384/HS512: the file's bytes are the secret, after trimming one
//     trailing "\n" or "\r\n". Secrets shorter than MinHMACSecretLength bytes
//     and files that look like PEM (a public key used as an HMAC secret is
//     the classic algorithm-confusion mistake) are refused.
//   - EdDSA (Ed25519), RS*/PS* (RSA, modulus >= MinRSABits), ES256 (P-256),
//     ES384 (P-384), ES512 (P-521): a PEM file holding exactly one key block,
//     either a public key ("PUBLIC KEY" PKIX, "RSA PUBLIC KEY" PKCS#1) or a
//     private key ("PRIVATE KEY" PKCS#8, "RSA PRIVATE KEY" PKCS#1,
//     "EC PRIVATE KEY" SEC 1) from which the public key is derived. An
//     "EC PARAMETERS" block is tolerated; encrypted PEM is refused.
//
// At most MaxKeyFileSize bytes are read. Errors wrap ErrInvalidKey (and the
// os error, e.g. fs.ErrNotExist, when the file cannot be read); they name
// the path and the reason, never key bytes.
func LoadKey(id, algorithm, path string) (Key, error) {
	alg, data, err := loadFile(id, algorithm, path)
	if err != nil {
		return Key{}, err
	}
	if alg.family == familyHMAC {
		secret, err := hmacSecret(data)
		if err != nil {
			return Key{}, keyErr(path, algorithm, err.Error())
		}
		return Key{ID: id, Algorithm: algorithm, material: secret}, nil
	}
	pub, _, err := parsePEM(data)
	if err != nil {
		return Key{}, keyErr(path, algorithm, err.Error())
	}
	if err := checkPublic(alg, pub); err != nil {
		return Key{}, keyErr(path, algorithm, err.Error())
	}
	return Key{ID: id, Algorithm: algorithm, material: pub}, nil
}

// LoadSigningKey reads a signing key for algorithm from the file at path.
// The formats are those of LoadKey, except that asymmetric algorithms need a
// private key block ("PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"); a
// public key is refused. Errors wrap ErrInvalidKey, name the path and the
// reason, and never contain key bytes.
func LoadSigningKey(id, algorithm, path string) (SigningKey, error) {
	alg, data, err := loadFile(id, algorithm, path)
	if err != nil {
		return SigningKey{}, err
	}
	if alg.family == familyHMAC {
		secret, err := hmacSecret(data)
		if err != nil {
			return SigningKey{}, keyErr(path, algorithm, err.Error())
		}
		return SigningKey{ID: id, Algorithm: algorithm, material: secret}, nil
	}
	pub, priv, err := parsePEM(data)
	if err != nil {
		return SigningKey{}, keyErr(path, algorithm, err.Error())
	}
	if err := checkPublic(alg, pub); err != nil {
		return SigningKey{}, keyErr(path, algorithm, err.Error())
	}
	if priv == nil {
		return SigningKey{}, keyErr(path, algorithm, "file holds a public key; a private key is needed to sign")
	}
	return SigningKey{ID: id, Algorithm: algorithm, material: priv}, nil
}

func keyErr(path, algorithm, reason string) error {
	return fmt.Errorf("%w: %s key file %q: %s", ErrInvalidKey, algorithm, path, reason)
}

// lookupAlgorithm resolves a JWS alg name, refusing "none" and unknown names.
func lookupAlgorithm(name string) (algInfo, error) {
	if strings.EqualFold(name, "none") {
		return algInfo{}, errors.New(`algorithm "none" is never accepted`)
	}
	alg, ok := algorithms[name]
	if !ok {
		return algInfo{}, fmt.Errorf("unknown algorithm %q (want one of HS256, HS384, HS512, EdDSA, RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512)", name)
	}
	return alg, nil
}

func checkKeyID(id string) error {
	if id == "" {
		return errors.New("key ID is empty")
	}
	if len(id) > maxKeyIDLength {
		return fmt.Errorf("key ID is longer than %d bytes", maxKeyIDLength)
	}
	return nil
}

func loadFile(id, algorithm, path string) (algInfo, []byte, error) {
	if err := checkKeyID(id); err != nil {
		return algInfo{}, nil, keyErr(path, algorithm, err.Error())
	}
	alg, err := lookupAlgorithm(algorithm)
	if err != nil {
		return algInfo{}, nil, fmt.Errorf("%w: key file %q: %s", ErrInvalidKey, path, err.Error())
	}
	f, err := os.Open(path)
	if err != nil {
		return algInfo{}, nil, fmt.Errorf("%w: %s key file: %w", ErrInvalidKey, algorithm, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxKeyFileSize+1))
	if err != nil {
		return algInfo{}, nil, fmt.Errorf("%w: %s key file: %w", ErrInvalidKey, algorithm, err)
	}
	if len(data) > MaxKeyFileSize {
		return algInfo{}, nil, keyErr(path, algorithm, fmt.Sprintf("file is larger than %d bytes", MaxKeyFileSize))
	}
	return alg, data, nil
}

func hmacSecret(data []byte) ([]byte, error) {
	if s, ok := bytes.CutSuffix(data, []byte("\r\n")); ok {
		data = s
	} else if s, ok := bytes.CutSuffix(data, []byte("\n")); ok {
		data = s
	}
	if bytes.HasPrefix(bytes.TrimSpace(data), []byte("-----BEGIN")) {
		return nil, errors.New("file looks like a PEM key; an HMAC algorithm needs a raw shared secret")
	}
	if len(data) < MinHMACSecretLength {
		return nil, fmt.Errorf("secret is %d bytes, shorter than the minimum of %d", len(data), MinHMACSecretLength)
	}
	return bytes.Clone(data), nil
}

// parsePEM returns the public key in data and, if data holds a private key,
// the private key too. Error texts never include key bytes (x509 parse
// errors are replaced by fixed reasons).
func parsePEM(data []byte) (crypto.PublicKey, crypto.Signer, error) {
	var (
		pub   crypto.PublicKey
		priv  crypto.Signer
		found int
	)
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type == "EC PARAMETERS" {
			continue
		}
		if strings.Contains(block.Headers["Proc-Type"], "ENCRYPTED") || block.Type == "ENCRYPTED PRIVATE KEY" {
			return nil, nil, errors.New("encrypted PEM keys are not supported")
		}
		found++
		if found > 1 {
			return nil, nil, errors.New("file holds more than one PEM key block")
		}
		var err error
		switch block.Type {
		case "PUBLIC KEY":
			pub, err = x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, nil, errors.New(`"PUBLIC KEY" block is not a valid PKIX public key`)
			}
		case "RSA PUBLIC KEY":
			pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
			if err != nil {
				return nil, nil, errors.New(`"RSA PUBLIC KEY" block is not a valid PKCS #1 public key`)
			}
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, nil, errors.New(`"PRIVATE KEY" block is not a valid PKCS #8 private key`)
			}
			s, ok := k.(crypto.Signer)
			if !ok {
				return nil, nil, fmt.Errorf("PKCS #8 key of type %T cannot sign", k)
			}
			priv = s
		case "RSA PRIVATE KEY":
			k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
			if err != nil {
				return nil, nil, errors.New(`"RSA PRIVATE KEY" block is not a valid PKCS #1 private key`)
			}
			priv = k
		case "EC PRIVATE KEY":
			k, err := x509.ParseECPrivateKey(block.Bytes)
			if err != nil {
				return nil, nil, errors.New(`"EC PRIVATE KEY" block is not a valid SEC 1 private key`)
			}
			priv = k
		default:
			return nil, nil, fmt.Errorf("unsupported PEM block type %q", block.Type)
		}
	}
	if found == 0 {
		return nil, nil, errors.New("no PEM key block found")
	}
	if priv != nil {
		pub = priv.Public()
	}
	return pub, priv, nil
}

// checkPublic reports whether pub is a key of the family (and curve, size)
// that alg needs.
func checkPublic(alg algInfo, pub crypto.PublicKey) error {
	switch alg.family {
	case familyEd25519:
		if k, ok := pub.(ed25519.PublicKey); !ok || len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("key is %s, EdDSA needs an Ed25519 key", describe(pub))
		}
	case familyRSA:
		k, ok := pub.(*rsa.PublicKey)
		if !ok {
			return fmt.Errorf("key is %s, %s needs an RSA key", describe(pub), alg.method.Alg())
		}
		if k.N == nil || k.N.BitLen() < MinRSABits {
			return fmt.Errorf("RSA modulus is %d bits, shorter than the minimum of %d", bitLen(k), MinRSABits)
		}
	case familyECDSA:
		k, ok := pub.(*ecdsa.PublicKey)
		if !ok {
			return fmt.Errorf("key is %s, %s needs an ECDSA %s key", describe(pub), alg.method.Alg(), alg.curve.Params().Name)
		}
		if k.Curve != alg.curve {
			return fmt.Errorf("key is %s, %s needs curve %s", describe(pub), alg.method.Alg(), alg.curve.Params().Name)
		}
	default:
		return errors.New("not an asymmetric algorithm")
	}
	return nil
}

func bitLen(k *rsa.PublicKey) int {
	if k.N == nil {
		return 0
	}
	return k.N.BitLen()
}

// describe names a key's type without revealing any of it.
func describe(pub crypto.PublicKey) string {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return "Ed25519"
	case *rsa.PublicKey:
		return "RSA"
	case *ecdsa.PublicKey:
		if k.Curve != nil {
			return "ECDSA " + k.Curve.Params().Name
		}
		return "ECDSA"
	default:
		return fmt.Sprintf("%T", pub)
	}
}

// checkVerifyMaterial re-validates a Key's material against its (exported,
// hence mutable) Algorithm before a Verifier trusts it.
func checkVerifyMaterial(k Key) (algInfo, error) {
	if err := checkKeyID(k.ID); err != nil {
		return algInfo{}, err
	}
	alg, err := lookupAlgorithm(k.Algorithm)
	if err != nil {
		return algInfo{}, err
	}
	if alg.family == familyHMAC {
		s, ok := k.material.([]byte)
		if !ok {
			return algInfo{}, fmt.Errorf("%s needs an HMAC secret, key holds %s", k.Algorithm, describeMaterial(k.material))
		}
		if len(s) < MinHMACSecretLength {
			return algInfo{}, fmt.Errorf("secret shorter than %d bytes", MinHMACSecretLength)
		}
		return alg, nil
	}
	if _, isSecret := k.material.([]byte); isSecret || k.material == nil {
		return algInfo{}, fmt.Errorf("%s needs a public key, key holds %s", k.Algorithm, describeMaterial(k.material))
	}
	if err := checkPublic(alg, k.material); err != nil {
		return algInfo{}, err
	}
	return alg, nil
}

// checkSignMaterial re-validates a SigningKey's material against its
// Algorithm before Mint uses it.
func checkSignMaterial(k SigningKey) (algInfo, error) {
	if err := checkKeyID(k.ID); err != nil {
		return algInfo{}, err
	}
	alg, err := lookupAlgorithm(k.Algorithm)
	if err != nil {
		return algInfo{}, err
	}
	if alg.family == familyHMAC {
		s, ok := k.material.([]byte)
		if !ok || len(s) < MinHMACSecretLength {
			return algInfo{}, fmt.Errorf("%s needs an HMAC secret of at least %d bytes, key holds %s", k.Algorithm, MinHMACSecretLength, describeMaterial(k.material))
		}
		return alg, nil
	}
	s, ok := k.material.(crypto.Signer)
	if !ok {
		return algInfo{}, fmt.Errorf("%s needs a private key, key holds %s", k.Algorithm, describeMaterial(k.material))
	}
	if err := checkPublic(alg, s.Public()); err != nil {
		return algInfo{}, err
	}
	return alg, nil
}

func describeMaterial(m any) string {
	switch m.(type) {
	case nil:
		return "nothing"
	case []byte:
		return "an HMAC secret"
	case crypto.Signer:
		return "a private key"
	default:
		return describe(m)
	}
}
