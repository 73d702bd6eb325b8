package main

import (
	"net/http"
	"strings"
)

// emailRequest is the body of POST /emails.
type emailRequest struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// emailReceipt is the body of a 202 from POST /emails.
type emailReceipt struct {
	Status  string `json:"status"`
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// sendEmail "sends" the email by logging it, then answers 202. Behind the
// idempotency middleware a retried request logs nothing more.
func (a *api) sendEmail(w http.ResponseWriter, r *http.Request) {
	var req emailRequest
	if !readRequest(w, r, &req) {
		return
	}
	a.log.Info("email sent", "to", req.To, "subject", req.Subject)
	writeJSON(w, http.StatusAccepted, emailReceipt{Status: "sent", To: req.To, Subject: req.Subject})
}

func (emailRequest) problemType() string { return problemInvalidEmail }

func (emailRequest) usage() string {
	return `the body must be a JSON object {"to": string, "subject": string}`
}

func (req emailRequest) invalid() string {
	if !strings.Contains(req.To, "@") || req.Subject == "" {
		return "to must be an email address and subject must not be empty"
	}
	return ""
}
