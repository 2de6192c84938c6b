// MakeTlsServer: tg-server's HTTPS server (cpp-httplib's SSLServer, TLS 1.2 and newer) from a
// PEM certificate file (the server's certificate, then any intermediates it sends) and its
// unencrypted PEM private key. Both are parsed with OpenSSL first, so that a file that cannot
// be read, holds no certificate or key, is encrypted or does not match is an error naming the
// file and what is wrong, never a crash or a passphrase prompt. Thread-safe (no shared state).
#ifndef TENSORGRID_SERVE_TLS_SERVER_H_
#define TENSORGRID_SERVE_TLS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace tg::serve {

// INVALID_ARGUMENT naming --ssl-cert/--ssl-key, the file and the reason for unusable files;
// UNIMPLEMENTED where cpp-httplib was built without OpenSSL.
absl::StatusOr<std::unique_ptr<httplib::Server>> MakeTlsServer(const std::string& cert_file,
                                                               const std::string& key_file);

}  // namespace tg::serve

#endif  // TENSORGRID_SERVE_TLS_SERVER_H_
