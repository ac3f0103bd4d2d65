// Loaded with `node --import ./resolve-domain.mjs`: resolves every name
// under TEST_DOMAIN (and TEST_DOMAIN itself) to TEST_DOMAIN_IP, as a
// wildcard DNS record *.<domain> would, for this process only. Other names
// resolve as usual. The E2B SDK and fetch connect through dns.lookup.
import dns from 'node:dns'

const domain = (process.env.TEST_DOMAIN || '').toLowerCase()
const ip = process.env.TEST_DOMAIN_IP || '127.0.0.1'
const lookup = dns.lookup

function covered(host) {
  const h = String(host).toLowerCase().replace(/\.$/, '')
  return domain !== '' && (h === domain || h.endsWith('.' + domain))
}

dns.lookup = function (host, options, callback) {
  if (typeof options === 'function') {
    callback = options
    options = {}
  }
  if (!covered(host)) return lookup.call(this, host, options, callback)
  const opts = typeof options === 'number' ? { family: options } : options || {}
  if (opts.all) return process.nextTick(callback, null, [{ address: ip, family: 4 }])
  return process.nextTick(callback, null, ip, 4)
}
