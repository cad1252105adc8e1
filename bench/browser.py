"""Debian's Chromium, as the monitor's benchmarks and browser tests launch it (headless,
sandbox and background services off). Playwright's own browser download is never used: set
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 and install the `chromium` package."""

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
