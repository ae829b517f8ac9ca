package transport

// HeaderToken marks an envelope whose sender minted a dedup token for it
// in the store the consumers share (the token inbox). Its value is "1". A
// consumer whose store keeps tokens claims the token in the unit of work
// that applies the message, and treats the message as a duplicate once the
// token is gone. An envelope without the header is deduplicated by the
// retention inbox alone.
const HeaderToken = "idem-token"
