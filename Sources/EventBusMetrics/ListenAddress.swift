import Foundation
import SystemCalls

/// Where the metrics endpoint listens: an IP address literal and a TCP port, as written in the
/// config (`127.0.0.1:9464`, `[::1]:9464`, `0.0.0.0:9464`).
///
/// Why literals only: a name would be resolved once at start, and the answer may change or
/// block; an operator exposing metrics beyond the machine says exactly which address.
public struct ListenAddress: Sendable, Hashable, CustomStringConvertible {
    public enum Family: Sendable, Hashable { case ipv4, ipv6 }

    public var host: String
    public var port: UInt16
    public var family: Family

    /// Parses `HOST:PORT`; the error text says what is wrong, for the config's error line.
    public init(parsing text: String) throws(ListenAddressError) {
        let hostPart: Substring
        let portPart: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw ListenAddressError("expected [IPv6]:PORT such as [::1]:9464, found \"\(text)\"")
            }
            hostPart = text[text.index(after: text.startIndex)..<close]
            portPart = text[text.index(close, offsetBy: 2)...]
            family = .ipv6
        } else {
            guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") else {
                throw ListenAddressError("expected HOST:PORT such as 127.0.0.1:9464 (an IPv6 address in brackets), found \"\(text)\"")
            }
            hostPart = text[..<colon]
            portPart = text[text.index(after: colon)...]
            family = .ipv4
        }
        guard let port = UInt16(portPart), port > 0 else {
            throw ListenAddressError("the port must be a number from 1 to 65535, found \"\(portPart)\"")
        }
        self.host = String(hostPart)
        self.port = port
        guard System.StreamSocket.isAddressLiteral(host, ipv6: family == .ipv6) else {
            throw ListenAddressError("\"\(host)\" is not an \(family == .ipv4 ? "IPv4" : "IPv6") address literal (names are not resolved)")
        }
    }

    public var description: String { family == .ipv4 ? "\(host):\(port)" : "[\(host)]:\(port)" }
}

public struct ListenAddressError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
