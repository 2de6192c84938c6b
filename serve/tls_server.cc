#include "serve/tls_server.h"

#include <httplib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#endif

namespace tg::serve {

#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
namespace {

// A PEM certificate chain or key is a few KiB; a larger file is the wrong file.
constexpr size_t kMaxPemBytes = 1 << 20;

// The PEM file `path`, which flag `flag` named (for the messages).
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* flag) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", flag, " '", path, "': ", std::strerror(errno)));
  }
  std::string data;
  char buf[4096];
  size_t n;
  while (data.size() <= kMaxPemBytes && (n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    data.append(buf, n);
  }
  const int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", flag, " '", path, "': ", std::strerror(err)));
  }
  if (data.size() > kMaxPemBytes) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "' is over ", kMaxPemBytes,
                                                   " bytes: not a PEM certificate or key"));
  }
  return data;
}

// The oldest TLS served: 1.0 and 1.1 are deprecated (RFC 8996); cpp-httplib's default is 1.1.
constexpr int kMinTlsVersion = TLS1_2_VERSION;

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

// OpenSSL's reason for this thread's last failure ("no start line", "key values mismatch");
// clears its error queue.
std::string OpenSslReason() {
  const unsigned long e = ERR_peek_last_error();
  const char* reason = e != 0 ? ERR_reason_error_string(e) : nullptr;
  std::string out = reason != nullptr ? reason : absl::StrCat("OpenSSL error ", e);
  ERR_clear_error();
  return out;
}

// Never asks for a passphrase (OpenSSL's default prompts on the terminal): an encrypted key
// fails to load, with a message saying so.
int NoPassphrase(char*, int, int, void*) { return -1; }

// The server's identity: its certificate, the chain after it, its private key.
struct TlsIdentity {
  X509Ptr cert;
  std::vector<X509Ptr> chain;
  std::unique_ptr<EVP_PKEY, PkeyFree> key;
};

absl::StatusOr<TlsIdentity> LoadTlsIdentity(const std::string& cert_file,
                                            const std::string& key_file) {
  ERR_clear_error();
  TlsIdentity id;
  absl::StatusOr<std::string> pem = ReadPemFile(cert_file, "--ssl-cert");
  if (!pem.ok()) return pem.status();
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())));
  id.cert.reset(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
  if (id.cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ssl-cert '", cert_file, "' holds no PEM certificate (OpenSSL: ", OpenSslReason(),
        "); it wants the server's certificate, -----BEGIN ", "CERTIFICATE-----, then its chain"));
  }
  while (X509* next = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    id.chain.emplace_back(next);
  }
  // The chain ends where no further certificate starts; anything else is a broken one.
  if (const unsigned long e = ERR_peek_last_error();
      e != 0 && ERR_GET_REASON(e) != PEM_R_NO_START_LINE) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ssl-cert '", cert_file, "': certificate ", id.chain.size() + 2,
                     " in the file is broken (OpenSSL: ", OpenSslReason(), ")"));
  }
  ERR_clear_error();
  pem = ReadPemFile(key_file, "--ssl-key");
  if (!pem.ok()) return pem.status();
  bio.reset(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())));
  id.key.reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (id.key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ssl-key '", key_file, "' holds no usable PEM private key (OpenSSL: ", OpenSslReason(),
        "); it wants an unencrypted one, -----BEGIN PRIVATE ",
        "KEY----- (`openssl pkey -in KEY -out PLAIN` decrypts one)"));
  }
  if (X509_check_private_key(id.cert.get(), id.key.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ssl-key '", key_file, "' is not the key of the certificate --ssl-cert '",
                     cert_file, "' (OpenSSL: ", OpenSslReason(), ")"));
  }
  return id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<httplib::Server>> MakeTlsServer(const std::string& cert_file,
                                                               const std::string& key_file) {
  absl::StatusOr<TlsIdentity> id = LoadTlsIdentity(cert_file, key_file);
  if (!id.ok()) return id.status();
  // The callback runs in the constructor; SSL_CTX_use_* take references of their own.
  auto server = std::make_unique<httplib::SSLServer>([&id](SSL_CTX& ctx) {
    SSL_CTX_set_options(&ctx,
                        SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
    if (SSL_CTX_set_min_proto_version(&ctx, kMinTlsVersion) != 1 ||
        SSL_CTX_use_certificate(&ctx, id->cert.get()) != 1) {
      return false;
    }
    for (const X509Ptr& c : id->chain) {
      if (SSL_CTX_add1_chain_cert(&ctx, c.get()) != 1) return false;
    }
    return SSL_CTX_use_PrivateKey(&ctx, id->key.get()) == 1 && SSL_CTX_check_private_key(&ctx) == 1;
  });
  if (!server->is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot serve TLS with --ssl-cert '", cert_file,
                                                   "' and --ssl-key '", key_file,
                                                   "': ", OpenSslReason()));
  }
  return server;
}
#else
absl::StatusOr<std::unique_ptr<httplib::Server>> MakeTlsServer(const std::string&,
                                                               const std::string&) {
  return absl::UnimplementedError(
      "this tg-server was built with a cpp-httplib without OpenSSL support (no --ssl-cert)");
}
#endif

}  // namespace tg::serve
