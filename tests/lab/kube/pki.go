package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// runPKI writes everything the lab's control plane needs to authenticate: a CA, the API server's
// serving certificate, an admin client certificate (group system:masters), a controller-manager
// client certificate, the service-account signing key pair and kubeconfigs. Existing files are kept,
// so a restarted lab keeps trusting the kubeconfig a person already uses.
func runPKI(args []string) int {
	fs := flag.NewFlagSet("pki", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for the generated files")
	server := fs.String("server", "https://127.0.0.1:6443", "API server URL for the kubeconfigs")
	node := fs.String("node", "", "also write a kubelet's certificates for this node name")
	if err := fs.Parse(args); err != nil || *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: kube-lab pki --dir DIR [--server URL] [--node NAME]")
		return 2
	}
	if err := writePKI(*dir, *server); err != nil {
		fmt.Fprintln(os.Stderr, "kube-lab pki:", err)
		return 1
	}
	if *node != "" {
		if err := writeNodePKI(*dir, *server, *node); err != nil {
			fmt.Fprintln(os.Stderr, "kube-lab pki:", err)
			return 1
		}
	}
	return 0
}

// writeNodePKI adds, signed by the lab's CA, what a node needs: the kubelet's client certificate
// (user system:node:NAME, group system:nodes, so the Node authorizer applies), its serving
// certificate for 127.0.0.1, the scheduler's kubeconfig, and the client certificate the API server
// shows the kubelet for logs and exec.
func writeNodePKI(dir, server, node string) error {
	if _, err := os.Stat(filepath.Join(dir, "kubelet.kubeconfig")); err == nil {
		return nil
	}
	ca, err := loadCA(dir)
	if err != nil {
		return err
	}
	kubelet, err := newCert(ca, pkix.Name{CommonName: "system:node:" + node,
		Organization: []string{"system:nodes"}}, false, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	serving, err := newCert(ca, pkix.Name{CommonName: node}, false, []string{node, "localhost"},
		[]net.IP{net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	scheduler, err := newCert(ca, pkix.Name{CommonName: "system:kube-scheduler"},
		false, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	apiClient, err := newCert(ca, pkix.Name{CommonName: "kube-apiserver-kubelet-client"},
		false, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
	}{
		{"kubelet-serving.crt", certPEM(serving)},
		{"kubelet-serving.key", keyPEM(serving.key)},
		{"apiserver-kubelet-client.crt", certPEM(apiClient)},
		{"apiserver-kubelet-client.key", keyPEM(apiClient.key)},
		{"scheduler.kubeconfig", kubeconfig(server, ca, scheduler, "kube-scheduler")},
		// Last: its presence marks a complete set.
		{"kubelet.kubeconfig", kubeconfig(server, ca, kubelet, "system:node:"+node)},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func loadCA(dir string) (*keyPair, error) {
	certData, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	keyData, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, err
	}
	certBlock, _ := pem.Decode(certData)
	keyBlock, _ := pem.Decode(keyData)
	if certBlock == nil || keyBlock == nil {
		return nil, fmt.Errorf("ca.crt or ca.key in %s is not PEM", dir)
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key}, nil
}

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func writePKI(dir, server string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "admin.kubeconfig")); err == nil {
		return nil
	}
	ca, err := newCert(nil, pkix.Name{CommonName: "vm-api-lab-ca"}, true, nil, nil, 0)
	if err != nil {
		return err
	}
	serving, err := newCert(ca, pkix.Name{CommonName: "kube-apiserver"}, false,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	admin, err := newCert(ca, pkix.Name{CommonName: "lab-admin", Organization: []string{"system:masters"}},
		false, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	kcm, err := newCert(ca, pkix.Name{CommonName: "system:kube-controller-manager"},
		false, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"ca.crt":                        certPEM(ca),
		"ca.key":                        keyPEM(ca.key),
		"serving.crt":                   certPEM(serving),
		"serving.key":                   keyPEM(serving.key),
		"sa.key":                        keyPEM(saKey),
		"sa.pub":                        pubPEM(&saKey.PublicKey),
		"controller-manager.kubeconfig": kubeconfig(server, ca, kcm, "kube-controller-manager"),
		"admin.kubeconfig":              kubeconfig(server, ca, admin, "lab-admin"),
	}
	// admin.kubeconfig last: its presence marks a complete set.
	for _, name := range []string{"ca.crt", "ca.key", "serving.crt", "serving.key", "sa.key", "sa.pub",
		"controller-manager.kubeconfig", "admin.kubeconfig"} {
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o600); err != nil {
			return err
		}
	}
	return nil
}

func newCert(parent *keyPair, subject pkix.Name, isCA bool, dnsNames []string, ips []net.IP,
	usage x509.ExtKeyUsage) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		DNSNames:     dnsNames,
		IPAddresses:  ips,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	signer, signerKey := tmpl, key
	if isCA {
		tmpl.IsCA = true
		tmpl.BasicConstraintsValid = true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key}, nil
}

func certPEM(kp *keyPair) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.cert.Raw})
}

func keyPEM(key *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func pubPEM(key *ecdsa.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func kubeconfig(server string, ca, client *keyPair, user string) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: vm-api-lab
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: vm-api-lab
  context:
    cluster: vm-api-lab
    user: %s
current-context: vm-api-lab
`, server, b64(certPEM(ca)), user, b64(certPEM(client)), b64(keyPEM(client.key)), user))
}
